// Two-level reduce (registered as reduce "hier"; hierarchical.h has the family's why).
//
// Shape: one leader per host (the root on its own host, the lowest rank elsewhere).
//   1. chain reduce inside each host to its leader, over shared memory (a leader other than the
//      root keeps its host's partial in scratch: its recvbuf need not exist);
//   2. chain reduce across hosts among the leaders, to the root: every host's link carries the
//      buffer once.
// kAvg sums in both phases and the root divides by n once. Uneven hosts are fine: every host has
// a leader, and a host of one rank hands its buffer on as it is.
#include <limits>

#include "algorithms/hierarchical.h"
#include "algorithms/reduce_chain.h"
#include "algorithms/subgroup.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

Status HierReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  if (!SpansTwoLevels(ctx, /*needs_uniform=*/false)) return ChainReduce(ctx, args);
  if (args.count == 0) return Status::Ok();
  const HostTopology& topology = *ctx.topology;
  const int host = topology.host_of(ctx.rank);
  const std::vector<int> leaders = LeaderGroup(topology, args.root);
  const int leader = leaders[host];
  const bool is_root = ctx.rank == args.root, is_leader = ctx.rank == leader;
  const size_t partial_bytes =
      is_leader && !is_root ? args.count * DataTypeSize(args.type) : 0;
  CollectiveArgs sum = args;
  if (sum.op == ReduceOp::kAvg) sum.op = ReduceOp::kSum;
  {
    Subgroup inside(ctx, HostGroup(topology, host), partial_bytes);
    CollectiveArgs local = sum;
    local.recvbuf = is_root ? args.recvbuf : is_leader ? inside.Own() : nullptr;
    local.root = topology.local_rank(leader);
    BRAID_RETURN_IF_ERROR(ChainReduce(inside.context(), local));
  }
  if (!is_leader) return Status::Ok();
  Subgroup across(ctx, leaders, partial_bytes);
  CollectiveArgs cross = sum;
  cross.sendbuf = is_root ? args.recvbuf : across.Own();
  cross.recvbuf = is_root ? args.recvbuf : nullptr;
  cross.root = topology.host_of(args.root);  // leaders are one per host, in host order
  BRAID_RETURN_IF_ERROR(ChainReduce(across.context(), cross));
  if (is_root && args.op == ReduceOp::kAvg) {
    kernels::DivideInPlace(args.type, args.recvbuf, args.count, ctx.size);
  }
  return Status::Ok();
}

double HierReduceCost(const LinkModel& link, int n, size_t bytes) {
  const int hosts = link.hosts, m = link.ranks_per_host;
  if (hosts <= 1 || m <= 1 || hosts >= n) return std::numeric_limits<double>::infinity();
  return ChainReduceCost(IntraHostModel(link), m, bytes) + ChainReduceCost(link, hosts, bytes);
}

}  // namespace braid::algorithms
