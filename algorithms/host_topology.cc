#include "algorithms/host_topology.h"

#include <algorithm>
#include <map>

namespace braid::algorithms {

HostTopology HostTopology::OneHost(int nranks) {
  return FromHostKeys(std::vector<std::string>(static_cast<size_t>(std::max(nranks, 0)), ""));
}

HostTopology HostTopology::FromHostKeys(const std::vector<std::string>& host_keys) {
  HostTopology topology;
  std::map<std::string, int> numbered;
  for (const std::string& key : host_keys) {
    // Ranks are visited in order, so a host's number is fixed by its lowest rank.
    auto [at, added] = numbered.emplace(key, static_cast<int>(topology.members_.size()));
    if (added) topology.members_.emplace_back();
    const int host = at->second;
    topology.local_rank_.push_back(static_cast<int>(topology.members_[host].size()));
    topology.members_[host].push_back(static_cast<int>(topology.host_of_.size()));
    topology.host_of_.push_back(host);
  }
  for (const std::vector<int>& members : topology.members_) {
    const int count = static_cast<int>(members.size());
    if (topology.max_per_host_ != 0 && count != topology.max_per_host_) topology.uniform_ = false;
    topology.max_per_host_ = std::max(topology.max_per_host_, count);
  }
  return topology;
}

std::string HostTopology::Describe() const {
  const auto plural = [](int n, const char* word) {
    return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
  };
  if (uniform_) return plural(hosts(), "host") + " x " + plural(max_per_host_, "rank");
  int fewest = max_per_host_;
  for (const std::vector<int>& members : members_) {
    fewest = std::min(fewest, static_cast<int>(members.size()));
  }
  return plural(hosts(), "host") + ", " + std::to_string(fewest) + " to " +
         std::to_string(max_per_host_) + " ranks each";
}

}  // namespace braid::algorithms
