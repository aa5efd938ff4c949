#include "algorithms/registry.h"

#include <strings.h>

#include "algorithms/cost_model.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/chain_broadcast.h"
#include "algorithms/chain_reduce.h"
#include "algorithms/ring_allgather.h"
#include "algorithms/ring_reduce_scatter.h"
#include "algorithms/direct_allreduce.h"
#include "algorithms/dissemination_barrier.h"
#include "algorithms/gather.h"
#include "algorithms/pairwise_alltoall.h"
#include "algorithms/scatter.h"
#include "algorithms/binomial_broadcast.h"
#include "algorithms/binomial_reduce.h"
#include "algorithms/recursive_allreduce.h"
#include "algorithms/tree_allreduce.h"

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
      // --- ring family (ring_*.cc, chain_*.cc) ---
      {"ring", Collective::kAllReduce, RunRingAllReduce, RingAllReduceCost},
      {"ring", Collective::kBroadcast, ChainBroadcast, ChainBroadcastCost},
      {"ring", Collective::kReduce, ChainReduce, ChainReduceCost},
      {"ring", Collective::kAllGather, RingAllGather, RingAllGatherCost},
      {"ring", Collective::kReduceScatter, RingReduceScatter, RingReduceScatterCost},
      // --- end ring family ---

      // --- tree family (tree_*.cc, binomial_*.cc, recursive_*.cc) ---
      {"tree", Collective::kAllReduce, RunTreeAllReduce, TreeAllReduceCost},
      {"rd", Collective::kAllReduce, RunRecursiveDoublingAllReduce, RecursiveDoublingAllReduceCost},
      {"rhd", Collective::kAllReduce, RunRecursiveHalvingDoublingAllReduce,
       RecursiveHalvingDoublingAllReduceCost},
      {"binomial", Collective::kBroadcast, RunBinomialBroadcast, BinomialBroadcastCost},
      {"binomial", Collective::kReduce, RunBinomialReduce, BinomialReduceCost},
      // --- end tree family ---

      // --- direct family (allreduce, pairwise all-to-all, gather/scatter, barrier) ---
      {"direct", Collective::kAllReduce, RunDirectAllReduce, DirectAllReduceCost},
      {"pairwise", Collective::kAllToAll, PairwiseAllToAll, PairwiseAllToAllCost},
      {"direct", Collective::kGather, DirectGather, DirectGatherCost},
      {"binomial", Collective::kGather, BinomialGather, BinomialGatherCost},
      {"direct", Collective::kScatter, DirectScatter, DirectScatterCost},
      {"binomial", Collective::kScatter, BinomialScatter, BinomialScatterCost},
      {"dissemination", Collective::kBarrier, DisseminationBarrier, DisseminationBarrierCost},
      // --- end direct family ---
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
