// HostTopology: which ranks of a communicator share a host.
//
// Why algorithms need it: inside a host ranks reach each other through shared memory at several
// GB/s, across hosts through a network link that all the host's ranks share. A flat ring treats
// every hop alike; two-level algorithms (reduce inside each host, then across hosts) and the cost
// model that chooses between them need the hosts, the ranks on each, and each rank's place there.
//
// "Host" is what the transports mean by it: one kernel and one network namespace
// (rendezvous::HostKey), so namespaces on one machine (tests/multihost) are separate hosts. The
// communicator builds it from the peer table, so every rank holds the same topology.
#pragma once

#include <string>
#include <vector>

namespace braid::algorithms {

class HostTopology {
 public:
  // Every rank on one host (tests and tools that model a single machine).
  static HostTopology OneHost(int nranks);
  // `host_keys[r]` names rank r's host; ranks with equal keys share it. Hosts are numbered in the
  // order of their lowest rank, so rank 0 is on host 0 and the numbering is the same everywhere.
  static HostTopology FromHostKeys(const std::vector<std::string>& host_keys);

  int ranks() const { return static_cast<int>(host_of_.size()); }
  int hosts() const { return static_cast<int>(members_.size()); }
  // The host rank `rank` runs on, in [0, hosts()).
  int host_of(int rank) const { return host_of_[rank]; }
  // The ranks on `host`, ascending.
  const std::vector<int>& ranks_on(int host) const { return members_[host]; }
  // `rank`'s index among the ranks of its host (0 for the lowest rank there).
  int local_rank(int rank) const { return local_rank_[rank]; }
  // The most ranks any host runs, and whether every host runs that many.
  int max_ranks_per_host() const { return max_per_host_; }
  bool uniform() const { return uniform_; }
  // "2 hosts x 4 ranks", "3 hosts, 1 to 4 ranks each", "1 host x 8 ranks".
  std::string Describe() const;

 private:
  std::vector<int> host_of_;
  std::vector<int> local_rank_;
  std::vector<std::vector<int>> members_;
  int max_per_host_ = 0;
  bool uniform_ = true;
};

}  // namespace braid::algorithms
