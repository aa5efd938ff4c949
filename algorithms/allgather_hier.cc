// Two-level all-gather (registered as allgather "hier"; hierarchical.h has the family's why).
//
// Shape, with m ranks on each of H hosts, this rank at place l on host h; block b of recvbuf is
// rank b's contribution, and P_l are the ranks at place l, one per host in host order:
//   1. ring all-gather across hosts among P_l: this rank gets the blocks of every host's place-l
//      rank. The m places cross at once, each with its own blocks, so a host's link carries
//      (H-1)/H of the result, where a flat ring sends (n-1)/n of it across;
//   2. all-gather inside the host of the H blocks each local rank now holds.
// Every block is received straight into its place in recvbuf (ring_blocks.h says why that is
// safe); out of place, this rank's block is first copied there from sendbuf.
#include <cstring>
#include <limits>
#include <vector>

#include "algorithms/allgather_ring.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"
#include "algorithms/ring_blocks.h"
#include "algorithms/subgroup.h"

namespace braid::algorithms {

Status HierAllGather(const CollectiveContext& ctx, const CollectiveArgs& args) {
  if (!SpansTwoLevels(ctx, /*needs_uniform=*/true)) return RingAllGather(ctx, args);
  if (args.count == 0) return Status::Ok();
  const HostTopology& topology = *ctx.topology;
  const int host = topology.host_of(ctx.rank), place = topology.local_rank(ctx.rank);
  const int m = topology.max_ranks_per_host();
  const size_t count = args.count, elem = DataTypeSize(args.type);
  char* out = static_cast<char*>(args.recvbuf);
  char* own = out + static_cast<size_t>(ctx.rank) * count * elem;
  if (own != args.sendbuf) std::memcpy(own, args.sendbuf, count * elem);

  // sets[l']: the blocks of P_l', one per host in host order.
  std::vector<std::vector<Block>> sets(m);
  for (int l = 0; l < m; ++l) {
    for (int rank : SamePlaceGroup(topology, l)) sets[l].push_back(Block{rank * count, count});
  }
  {
    // Across hosts each rank owns one block: its own.
    std::vector<std::vector<Block>> singles;
    for (const Block& block : sets[place]) singles.push_back({block});
    Subgroup across(ctx, SamePlaceGroup(topology, place));
    BRAID_RETURN_IF_ERROR(RingAllGatherBlocks(across.context(), args,
                                              "hier: all-gather across hosts", out, singles));
  }
  Subgroup inside(ctx, HostGroup(topology, host));
  return RingAllGatherBlocks(inside.context(), args, "hier: all-gather inside the host", out,
                             sets);
}

double HierAllGatherCost(const LinkModel& link, int n, size_t bytes) {
  const int hosts = link.hosts, m = link.ranks_per_host;
  if (hosts <= 1 || m <= 1 || hosts * m != n) return std::numeric_limits<double>::infinity();
  const double b = static_cast<double>(bytes);
  // The m places cross at once: the host's link carries (H-1)/H of the whole result.
  const double across = (hosts - 1) * link.latency_us +
                        cost::Transfer(link, static_cast<double>(hosts - 1) / hosts * b);
  return across + RingAllGatherCost(IntraHostModel(link), m, bytes);
}

}  // namespace braid::algorithms
