#include "algorithms/registry.h"

#include <strings.h>

#include "algorithms/allgather_ring.h"
#include "algorithms/allreduce_direct.h"
#include "algorithms/allreduce_recursive.h"
#include "algorithms/allreduce_ring.h"
#include "algorithms/allreduce_tree.h"
#include "algorithms/allreduce_two_shot.h"
#include "algorithms/alltoall_pairwise.h"
#include "algorithms/barrier_dissemination.h"
#include "algorithms/broadcast_binomial.h"
#include "algorithms/broadcast_chain.h"
#include "algorithms/cost_model.h"
#include "algorithms/gather.h"
#include "algorithms/hierarchical.h"
#include "algorithms/reduce_binomial.h"
#include "algorithms/reduce_chain.h"
#include "algorithms/read_family.h"
#include "algorithms/reduce_scatter_ring.h"
#include "algorithms/scatter.h"

namespace braid::algorithms {
namespace {

Status RunRingAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return RingAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op);
}

// 2(n-1) steps; each rank sends and receives 2(n-1)/n of the buffer and reduces (n-1)/n of it.
double RingAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double share = static_cast<double>(n - 1) / n * static_cast<double>(bytes);
  const double step = static_cast<double>(bytes) / n;
  return link.pipeline_us + 2 * (n - 1) * link.latency_us + 2 * cost::Transfer(link, share) +
         cost::PipelinedReduce(link, share, step) + cost::ChunkMessages(link, 2 * (n - 1), step);
}

}  // namespace

const std::vector<Algorithm>& Algorithms() {
  static const std::vector<Algorithm> kAlgorithms = {
      // --- ring family (*_ring.cc, *_chain.cc) ---
      {"ring", Collective::kAllReduce, RunRingAllReduce, RingAllReduceCost},
      {"ring", Collective::kBroadcast, ChainBroadcast, ChainBroadcastCost},
      {"ring", Collective::kReduce, ChainReduce, ChainReduceCost},
      {"ring", Collective::kAllGather, RingAllGather, RingAllGatherCost},
      {"ring", Collective::kReduceScatter, RingReduceScatter, RingReduceScatterCost},
      // --- end ring family ---

      // --- tree family (allreduce_tree.cc, allreduce_recursive.cc, broadcast_binomial.cc,
      // reduce_binomial.cc) ---
      {"tree", Collective::kAllReduce, RunTreeAllReduce, TreeAllReduceCost},
      {"rd", Collective::kAllReduce, RunRecursiveDoublingAllReduce, RecursiveDoublingAllReduceCost},
      {"rhd", Collective::kAllReduce, RunRecursiveHalvingDoublingAllReduce,
       RecursiveHalvingDoublingAllReduceCost},
      {"binomial", Collective::kBroadcast, RunBinomialBroadcast, BinomialBroadcastCost},
      {"binomial", Collective::kReduce, RunBinomialReduce, BinomialReduceCost},
      // --- end tree family ---

      // --- direct family (allreduce_direct.cc, alltoall_pairwise.cc, gather_*.cc, scatter_*.cc,
      // barrier_dissemination.cc) ---
      {"direct", Collective::kAllReduce, RunDirectAllReduce, DirectAllReduceCost},
      {"twoshot", Collective::kAllReduce, RunTwoShotAllReduce, TwoShotAllReduceCost},
      {"pairwise", Collective::kAllToAll, PairwiseAllToAll, PairwiseAllToAllCost},
      {"direct", Collective::kGather, DirectGather, DirectGatherCost},
      {"binomial", Collective::kGather, BinomialGather, BinomialGatherCost},
      {"direct", Collective::kScatter, DirectScatter, DirectScatterCost},
      {"binomial", Collective::kScatter, BinomialScatter, BinomialScatterCost},
      {"dissemination", Collective::kBarrier, DisseminationBarrier, DisseminationBarrierCost},
      // --- end direct family ---

      // --- read family (read_family.h: *_read.cc over peer_reads.h) ---
      {"read", Collective::kAllGather, ReadAllGather, ReadAllGatherCost},
      {"read", Collective::kBroadcast, ReadBroadcast, ReadBroadcastCost},
      {"read", Collective::kAllToAll, ReadAllToAll, ReadAllToAllCost},
      {"read", Collective::kGather, ReadGather, ReadGatherCost},
      {"read", Collective::kScatter, ReadScatter, ReadScatterCost},
      // --- end read family ---

      // --- two-level family (hierarchical.h: *_hier.cc) ---
      {"hier", Collective::kAllReduce, HierAllReduce, HierAllReduceCost},
      {"hier", Collective::kBroadcast, HierBroadcast, HierBroadcastCost},
      {"hier", Collective::kReduce, HierReduce, HierReduceCost},
      {"hier", Collective::kAllGather, HierAllGather, HierAllGatherCost},
      {"hier", Collective::kReduceScatter, HierReduceScatter, HierReduceScatterCost},
      // --- end two-level family ---
  };
  return kAlgorithms;
}

const Algorithm* FindAlgorithm(Collective kind, const char* name) {
  for (const Algorithm& algorithm : Algorithms()) {
    if (algorithm.kind == kind && strcasecmp(algorithm.name, name) == 0) return &algorithm;
  }
  return nullptr;
}

}  // namespace braid::algorithms
