// Two-level reduce-scatter (registered as reducescatter "hier"; hierarchical.h has the family's
// why).
//
// Shape, with m ranks on each of H hosts, this rank at place l on host h; block b of sendbuf is
// rank b's share of the result, and P_l are the ranks at place l, one per host in host order:
//   1. reduce-scatter inside the host: local rank l ends with its host's partial sums of the H
//      blocks of P_l, in host order, in scratch (H blocks: 1/m of the send buffer);
//   2. ring reduce-scatter of those H blocks across hosts among P_l: rank P_l[h] keeps block h,
//      its own, complete. The m places cross at once, each with 1/m of the data, so a host's link
//      carries (H-1)/H of the buffer, where a flat ring sends (n-1)/n of it across.
// kAvg sums in both phases and divides the result by n once.
//
// In place (recvbuf == sendbuf + rank·count): phase 1 only reads sendbuf, phase 2 writes recvbuf
// from scratch, after phase 1 is done with sendbuf.
#include <limits>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"
#include "algorithms/reduce_scatter_ring.h"
#include "algorithms/ring_blocks.h"
#include "algorithms/subgroup.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

Status HierReduceScatter(const CollectiveContext& ctx, const CollectiveArgs& args) {
  if (!SpansTwoLevels(ctx, /*needs_uniform=*/true)) return RingReduceScatter(ctx, args);
  if (args.count == 0) return Status::Ok();
  const HostTopology& topology = *ctx.topology;
  const int host = topology.host_of(ctx.rank), place = topology.local_rank(ctx.rank);
  const int m = topology.max_ranks_per_host(), hosts = topology.hosts();
  const size_t count = args.count, elem = DataTypeSize(args.type);
  // sets[l']: the blocks of P_l' in sendbuf; partials: where this rank keeps its host's sums.
  std::vector<std::vector<Block>> sets(m);
  std::vector<Block> partials;
  for (int l = 0; l < m; ++l) {
    for (int rank : SamePlaceGroup(topology, l)) sets[l].push_back(Block{rank * count, count});
  }
  for (int h = 0; h < hosts; ++h) partials.push_back(Block{h * count, count});
  CollectiveArgs sum = args;
  if (sum.op == ReduceOp::kAvg) sum.op = ReduceOp::kSum;
  const size_t partial_bytes = static_cast<size_t>(hosts) * count * elem;
  {
    Subgroup inside(ctx, HostGroup(topology, host), partial_bytes);
    BRAID_RETURN_IF_ERROR(RingReduceScatterBlocks(inside.context(), sum,
                                                  "hier: reduce-scatter inside the host",
                                                  args.sendbuf, sets, inside.Own(), partials));
  }
  Subgroup across(ctx, SamePlaceGroup(topology, place), partial_bytes);
  CollectiveArgs cross = sum;
  cross.sendbuf = across.Own();
  BRAID_RETURN_IF_ERROR(RingReduceScatter(across.context(), cross));
  if (args.op == ReduceOp::kAvg) kernels::DivideInPlace(args.type, args.recvbuf, count, ctx.size);
  return Status::Ok();
}

double HierReduceScatterCost(const LinkModel& link, int n, size_t bytes) {
  const int hosts = link.hosts, m = link.ranks_per_host;
  if (hosts <= 1 || m <= 1 || hosts * m != n) return std::numeric_limits<double>::infinity();
  const double b = static_cast<double>(bytes);
  const double across_share = static_cast<double>(hosts - 1) / hosts;
  // The m places cross at once: the host's link carries (H-1)/H of the whole buffer.
  const double across = (hosts - 1) * link.latency_us + cost::Transfer(link, across_share * b) +
                        cost::Reduce(link, across_share * b / m);
  return RingReduceScatterCost(IntraHostModel(link), m, bytes) + across;
}

}  // namespace braid::algorithms
