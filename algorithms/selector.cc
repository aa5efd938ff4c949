#include "algorithms/selector.h"

#include <strings.h>

#include <sstream>

#include "algorithms/registry.h"

namespace braid::algorithms {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool KnownName(const std::string& name, bool all_collectives, Collective kind) {
  for (const Algorithm& a : Algorithms()) {
    if ((all_collectives || a.kind == kind) && strcasecmp(a.name, name.c_str()) == 0) return true;
  }
  return false;
}

const Algorithm* FindAnyAlgorithm(Collective kind) {
  for (const Algorithm& a : Algorithms()) {
    if (a.kind == kind) return &a;
  }
  return nullptr;
}

}  // namespace

Result<AlgorithmPolicy> AlgorithmPolicy::Parse(const std::string& spec) {
  AlgorithmPolicy policy;
  policy.spec_ = spec;
  std::istringstream entries(spec);
  std::string entry;
  while (std::getline(entries, entry, ';')) {
    entry = Trim(entry);
    if (entry.empty()) continue;
    Rule rule;
    std::string list = entry;
    size_t colon = entry.find(':');
    if (colon != std::string::npos) {
      std::string name = Trim(entry.substr(0, colon));
      if (!ParseCollective(name.c_str(), &rule.kind)) {
        return Status::InvalidArgument("BRAID_ALGO='" + spec + "': unknown collective '" + name + "'");
      }
      rule.all_collectives = false;
      list = Trim(entry.substr(colon + 1));
    }
    if (!list.empty() && list[0] == '^') {
      rule.exclude = true;
      list = list.substr(1);
    }
    std::istringstream names(list);
    std::string name;
    while (std::getline(names, name, ',')) {
      name = Trim(name);
      if (name.empty()) continue;
      if (!KnownName(name, rule.all_collectives, rule.kind)) {
        return Status::InvalidArgument("BRAID_ALGO='" + spec + "': unknown algorithm '" + name +
                                       "'" + (rule.all_collectives ? "" : std::string(" for ") +
                                                                              CollectiveName(rule.kind)));
      }
      rule.names.push_back(name);
    }
    if (rule.names.empty()) {
      return Status::InvalidArgument("BRAID_ALGO='" + spec + "': entry '" + entry + "' names no algorithm");
    }
    policy.rules_.push_back(std::move(rule));
  }
  return policy;
}

bool AlgorithmPolicy::Allows(Collective kind, const char* algorithm) const {
  for (const Rule& rule : rules_) {
    if (!rule.all_collectives && rule.kind != kind) continue;
    bool listed = false;
    for (const std::string& name : rule.names) listed |= strcasecmp(name.c_str(), algorithm) == 0;
    if (rule.exclude ? listed : !listed) {
      // A global inclusion list only constrains collectives that have one of the listed names.
      if (rule.all_collectives && !rule.exclude) {
        bool any = false;
        for (const std::string& name : rule.names) any |= FindAlgorithm(kind, name.c_str()) != nullptr;
        if (!any) continue;
      }
      return false;
    }
  }
  return true;
}

Result<const Algorithm*> SelectAlgorithm(const CollectiveArgs& args, int nranks,
                                         const AlgorithmPolicy& policy, const LinkModel& link) {
  const Algorithm* best = nullptr;
  double best_cost = 0;
  const size_t bytes = args.MessageBytes(nranks);
  for (const Algorithm& a : Algorithms()) {
    if (a.kind != args.kind || !policy.Allows(a.kind, a.name)) continue;
    double cost = a.cost(link, nranks, bytes);
    if (best == nullptr || cost < best_cost) {
      best = &a;
      best_cost = cost;
    }
  }
  if (best == nullptr && FindAnyAlgorithm(args.kind) == nullptr) {
    return Status::InvalidUsage(std::string(CollectiveName(args.kind)) +
                                " has no algorithm in this build yet");
  }
  if (best == nullptr) {
    return Status::InvalidArgument(std::string("BRAID_ALGO='") + policy.spec() +
                                   "' leaves no algorithm for " + CollectiveName(args.kind));
  }
  return best;
}

}  // namespace braid::algorithms
