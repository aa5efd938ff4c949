// Two-level broadcast (registered as broadcast "hier"; hierarchical.h has the family's why).
//
// Shape: one leader per host (the root on its own host, the lowest rank elsewhere).
//   1. chain broadcast across hosts among the leaders, from the root: every host's link carries
//      the buffer once in (and once out, down the chain), where a flat chain over every rank
//      crosses between hosts wherever consecutive ranks sit on different hosts;
//   2. chain broadcast inside each host from its leader, over shared memory.
// Uneven hosts are fine: every host has a leader, and a host of one rank skips phase 2.
#include <limits>

#include "algorithms/broadcast_chain.h"
#include "algorithms/hierarchical.h"
#include "algorithms/subgroup.h"

namespace braid::algorithms {

Status HierBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args) {
  if (!SpansTwoLevels(ctx, /*needs_uniform=*/false)) return ChainBroadcast(ctx, args);
  if (args.count == 0) return Status::Ok();
  const HostTopology& topology = *ctx.topology;
  const int host = topology.host_of(ctx.rank);
  const std::vector<int> leaders = LeaderGroup(topology, args.root);
  const int leader = leaders[host];
  if (ctx.rank == leader) {
    Subgroup across(ctx, leaders);
    CollectiveArgs cross = args;
    cross.root = topology.host_of(args.root);  // leaders are one per host, in host order
    BRAID_RETURN_IF_ERROR(ChainBroadcast(across.context(), cross));
  }
  Subgroup inside(ctx, HostGroup(topology, host));
  CollectiveArgs local = args;
  local.sendbuf = args.recvbuf;  // the leader's copy, which phase 1 left in its recvbuf
  local.root = topology.local_rank(leader);
  return ChainBroadcast(inside.context(), local);
}

double HierBroadcastCost(const LinkModel& link, int n, size_t bytes) {
  const int hosts = link.hosts, m = link.ranks_per_host;
  if (hosts <= 1 || m <= 1 || hosts >= n) return std::numeric_limits<double>::infinity();
  return ChainBroadcastCost(link, hosts, bytes) + ChainBroadcastCost(IntraHostModel(link), m, bytes);
}

}  // namespace braid::algorithms
