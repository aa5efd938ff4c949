// Two-level allreduce (registered as allreduce "hier"; hierarchical.h has the family's why).
//
// Shape, with m ranks on each of H hosts, this rank at place l on host h: the buffer is cut into
// m shards (the ring's segment layout: the first count % m one element longer).
//   1. reduce-scatter inside the host: local rank l ends with shard l summed over its host, in
//      recvbuf at shard l's place;
//   2. ring allreduce of shard l across hosts, in place in recvbuf, among the H ranks of place l:
//      the m places run at once, each on its own 1/m of the buffer, so a host's link carries
//      2(H-1)/H of the buffer per direction, the least any allreduce can (the flat ring sends
//      2(n-1)/n of it across);
//   3. all-gather of the shards inside the host, in place in recvbuf.
// kAvg sums in phases 1 and 2 and divides shard l by n before phase 3, once.
//
// Why in place in recvbuf throughout: phase 1 writes only this rank's shard of recvbuf, from
// sendbuf (read only); phase 2 reads and writes that shard alone; phase 3 receives the other
// shards into their places. So no scratch is kept across phases, and in place (sendbuf ==
// recvbuf) phase 1 reads the other shards before anything overwrites them (phase 3 starts after
// phase 1's Finish).
#include <algorithm>
#include <limits>
#include <vector>

#include "algorithms/allgather_ring.h"
#include "algorithms/allreduce_ring.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"
#include "algorithms/reduce_scatter_ring.h"
#include "algorithms/ring_blocks.h"
#include "algorithms/subgroup.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

Status HierAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  if (!SpansTwoLevels(ctx, /*needs_uniform=*/true)) {
    return RingAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op);
  }
  if (args.count == 0) return Status::Ok();
  const HostTopology& topology = *ctx.topology;
  const int host = topology.host_of(ctx.rank), place = topology.local_rank(ctx.rank);
  const int m = topology.max_ranks_per_host();
  const size_t count = args.count;
  std::vector<std::vector<Block>> shards(m);
  for (int j = 0; j < m; ++j) {
    const size_t s = static_cast<size_t>(j);
    shards[j].push_back(Block{s * (count / m) + std::min(s, count % m), count / m + (s < count % m)});
  }
  CollectiveArgs sum = args;
  if (sum.op == ReduceOp::kAvg) sum.op = ReduceOp::kSum;
  char* out = static_cast<char*>(args.recvbuf);
  const Block own = shards[place].front();
  {
    Subgroup inside(ctx, HostGroup(topology, host));
    BRAID_RETURN_IF_ERROR(RingReduceScatterBlocks(inside.context(), sum,
                                                  "hier: reduce-scatter inside the host",
                                                  args.sendbuf, shards, out, shards[place]));
  }
  {
    Subgroup across(ctx, SamePlaceGroup(topology, place));
    char* shard = out + own.offset * DataTypeSize(args.type);
    BRAID_RETURN_IF_ERROR(
        RingAllReduce(across.context(), shard, shard, own.count, args.type, sum.op));
    if (args.op == ReduceOp::kAvg) kernels::DivideInPlace(args.type, shard, own.count, ctx.size);
  }
  Subgroup inside(ctx, HostGroup(topology, host));
  return RingAllGatherBlocks(inside.context(), sum, "hier: all-gather inside the host", out,
                             shards);
}

double HierAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  const int hosts = link.hosts, m = link.ranks_per_host;
  if (hosts <= 1 || m <= 1 || hosts * m != n) return std::numeric_limits<double>::infinity();
  const LinkModel inside = IntraHostModel(link);
  const double b = static_cast<double>(bytes), shard = b / m;
  const double across_share = static_cast<double>(hosts - 1) / hosts;
  // The m places cross at once, so the host's link carries m shards' ring traffic: 2(H-1)/H · B.
  const double across = link.pipeline_us + 2 * (hosts - 1) * link.latency_us +
                        cost::Transfer(link, 2 * across_share * b) +
                        cost::PipelinedReduce(link, across_share * shard, shard / hosts) +
                        cost::ChunkMessages(link, 2 * (hosts - 1), shard / hosts);
  return RingReduceScatterCost(inside, m, bytes) + across + RingAllGatherCost(inside, m, bytes);
}

}  // namespace braid::algorithms
