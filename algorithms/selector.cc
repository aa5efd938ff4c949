#include "algorithms/selector.h"

#include <strings.h>

#include <algorithm>
#include <limits>

#include "algorithms/registry.h"

namespace braid::algorithms {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> Split(const std::string& s, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    size_t end = s.find(separator, begin);
    parts.push_back(Trim(s.substr(begin, end == std::string::npos ? std::string::npos : end - begin)));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

bool AnyCollectiveHas(const std::string& name) {
  for (const Algorithm& a : Algorithms()) {
    if (strcasecmp(a.name, name.c_str()) == 0) return true;
  }
  return false;
}

// "binomial, ring" — the algorithms `kind` has, for error messages.
std::string Known(Collective kind) {
  std::string list;
  for (const Algorithm& a : Algorithms()) {
    if (a.kind != kind) continue;
    if (!list.empty()) list += ", ";
    list += a.name;
  }
  return list.empty() ? "none" : list;
}

}  // namespace

bool AlgorithmPolicy::Rule::Lists(const char* algorithm) const {
  for (const std::string& name : names) {
    if (strcasecmp(name.c_str(), algorithm) == 0) return true;
  }
  return false;
}

bool AlgorithmPolicy::GlobalRuleApplies(Collective kind) const {
  for (const Algorithm& a : Algorithms()) {
    if (a.kind == kind && global_->Allows(a.name)) return true;
  }
  return false;
}

Result<AlgorithmPolicy> AlgorithmPolicy::Parse(const std::string& spec) {
  AlgorithmPolicy policy;
  policy.spec_ = spec;
  auto error = [&](const std::string& what) {
    return Status::InvalidArgument("BRAID_ALGO='" + spec + "': " + what);
  };
  bool first = true;
  for (const std::string& entry : Split(spec, ';')) {
    if (entry.empty()) continue;
    const bool was_first = first;
    first = false;
    std::string list = entry;
    std::optional<Collective> kind;
    const size_t colon = entry.find(':');
    if (colon != std::string::npos) {
      const std::string name = Trim(entry.substr(0, colon));
      Collective parsed;
      if (!ParseCollective(name.c_str(), &parsed)) {
        return error("unknown collective '" + name +
                     "' (allreduce, broadcast, reduce, allgather, reducescatter, alltoall, "
                     "gather, scatter, barrier)");
      }
      kind = parsed;
      list = Trim(entry.substr(colon + 1));
    } else if (!was_first) {
      return error("entry '" + entry +
                   "' names no collective; only the first entry may apply to all collectives");
    }
    Rule rule;
    if (!list.empty() && list[0] == '^') {
      rule.exclude = true;
      list = Trim(list.substr(1));
    }
    for (const std::string& name : Split(list, ',')) {
      if (name.empty()) continue;
      if (kind ? FindAlgorithm(*kind, name.c_str()) == nullptr : !AnyCollectiveHas(name)) {
        return error("unknown algorithm '" + name + "'" +
                     (kind ? std::string(" for ") + CollectiveName(*kind) + " (it has: " +
                                 Known(*kind) + ")"
                           : std::string()));
      }
      rule.names.push_back(name);
    }
    if (rule.names.empty()) return error("entry '" + entry + "' names no algorithm");
    if (!kind) {
      policy.global_ = std::move(rule);
      continue;
    }
    const int index = static_cast<int>(*kind);
    if (policy.per_collective_[index]) {
      return error(std::string(CollectiveName(*kind)) + " is given more than once");
    }
    bool any = false;
    for (const Algorithm& a : Algorithms()) any |= a.kind == *kind && rule.Allows(a.name);
    if (!any) {
      return error("leaves no algorithm for " + std::string(CollectiveName(*kind)) + " (it has: " +
                   Known(*kind) + ")");
    }
    policy.per_collective_[index] = std::move(rule);
  }
  return policy;
}

bool AlgorithmPolicy::Allows(Collective kind, const char* algorithm) const {
  const int index = static_cast<int>(kind);
  if (index >= 0 && index < kNumCollectives && per_collective_[index]) {
    return per_collective_[index]->Allows(algorithm);
  }
  if (global_ && GlobalRuleApplies(kind)) return global_->Allows(algorithm);
  return true;
}

Result<Ranking> RankAlgorithms(const CollectiveArgs& args, int nranks,
                               const AlgorithmPolicy& policy, const LinkModel& link) {
  Ranking ranking;
  const size_t bytes = args.MessageBytes(nranks);
  for (const Algorithm& a : Algorithms()) {
    if (a.kind != args.kind || !policy.Allows(a.kind, a.name)) continue;
    const double cost =
        a.cost != nullptr ? a.cost(link, nranks, bytes) : std::numeric_limits<double>::infinity();
    // Equal costs (to rounding: the same formula summed in another order) go to the algorithm
    // registered first, so a tie never flips with the size.
    if (ranking.best == nullptr || cost < ranking.best_cost * (1 - 1e-9)) {
      ranking.runner_up = ranking.best;
      ranking.runner_up_cost = ranking.best_cost;
      ranking.best = &a;
      ranking.best_cost = cost;
    } else if (ranking.runner_up == nullptr || cost < ranking.runner_up_cost * (1 - 1e-9)) {
      ranking.runner_up = &a;
      ranking.runner_up_cost = cost;
    }
  }
  if (ranking.best == nullptr) {
    return Status::InvalidArgument(std::string("no algorithm for ") + CollectiveName(args.kind) +
                                   (Known(args.kind) == "none"
                                        ? std::string(" is registered")
                                        : " is allowed by BRAID_ALGO='" + policy.spec() + "'"));
  }
  return ranking;
}

Result<const Algorithm*> SelectAlgorithm(const CollectiveArgs& args, int nranks,
                                         const AlgorithmPolicy& policy, const LinkModel& link) {
  BRAID_ASSIGN_OR_RETURN(const Ranking ranking, RankAlgorithms(args, nranks, policy, link));
  return ranking.best;
}

Result<AlgorithmTrials::Plan> CachedSelector::Select(const CollectiveArgs& args) {
  const int kind = static_cast<int>(args.kind);
  if (kind < 0 || kind >= kNumCollectives) {
    BRAID_ASSIGN_OR_RETURN(const Algorithm* algorithm, SelectAlgorithm(args, nranks_, policy_, link_));
    return AlgorithmTrials::Plan{algorithm, nullptr};
  }
  Choice& last = last_[kind];
  if (last.valid && last.count == args.count && last.type == args.type && last.op == args.op &&
      last.root == args.root) {
    if (last.trial == nullptr) return AlgorithmTrials::Plan{last.algorithm, nullptr};
    const AlgorithmTrials::Plan plan = trials_.Continue(last.trial);
    if (plan.trial == nullptr) {  // settled: remember the winner alone
      last.algorithm = plan.algorithm;
      last.trial = nullptr;
    }
    return plan;
  }
  BRAID_ASSIGN_OR_RETURN(const Ranking ranking, RankAlgorithms(args, nranks_, policy_, link_));
  const AlgorithmTrials::Plan plan = trials_.Next(args, nranks_, ranking);
  last = Choice{true, args.count, args.type, args.op, args.root, plan.algorithm, plan.trial};
  return plan;
}

std::string TwoLevelChoices(const AlgorithmPolicy& policy, int nranks, const LinkModel& link) {
  const auto size_text = [](size_t bytes) {
    if (bytes >= (size_t{1} << 30)) return std::to_string(bytes >> 30) + " GiB";
    if (bytes >= (size_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
    if (bytes >= (size_t{1} << 10)) return std::to_string(bytes >> 10) + " KiB";
    return std::to_string(bytes) + " B";
  };
  std::string text;
  for (const Algorithm& a : Algorithms()) {
    if (strcasecmp(a.name, "hier") != 0) continue;
    // The smallest size from which every larger one tried picks it (0: none).
    size_t from = 0;
    for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 2) {
      CollectiveArgs args;
      args.kind = a.kind;
      const bool per_rank =
          a.kind == Collective::kAllGather || a.kind == Collective::kReduceScatter;
      args.count = std::max<size_t>(1, bytes / 4 / (per_rank ? nranks : 1));
      auto ranking = RankAlgorithms(args, nranks, policy, link);
      const bool picked = ranking.ok() && ranking.value().best == &a;
      if (picked && from == 0) from = bytes;
      if (!picked) from = 0;
    }
    if (!text.empty()) text += ", ";
    text += std::string(CollectiveName(a.kind)) + (from != 0 ? " from " + size_text(from) : " never");
  }
  return text.empty() ? "none registered" : text + " (cost model, float32)";
}

}  // namespace braid::algorithms
