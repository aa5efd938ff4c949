#include "algorithms/registry.h"

#include <strings.h>

#include "algorithms/ring_allreduce.h"

namespace braid::algorithms {
namespace {

Status RunRingAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return RingAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op);
}

// 2(n-1) steps; each rank sends and receives 2(n-1)/n of the buffer and reduces (n-1)/n of it.
double RingAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  double share = static_cast<double>(n - 1) / n * static_cast<double>(bytes) / 1e3;  // bytes → µs·GB/s
  return 2 * (n - 1) * link.latency_us + 2 * share / link.bandwidth_gbps +
         share / link.reduce_gbps;
}

}  // namespace

const std::vector<Algorithm>& Algorithms() {
  static const std::vector<Algorithm> kAlgorithms = {
      // --- ring family (ring_*.cc, chain_*.cc) ---
      {"ring", Collective::kAllReduce, RunRingAllReduce, RingAllReduceCost},
      // --- end ring family ---

      // --- tree family (tree_*.cc, binomial_*.cc, recursive_*.cc) ---
      // --- end tree family ---

      // --- direct family (pairwise all-to-all, gather/scatter, barrier) ---
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
