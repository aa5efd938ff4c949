// Building blocks of the algorithms' cost functions (Algorithm::cost), in one place so that every
// family prices a message step, a transfer and a reduction the same way.
//
// The model is the usual alpha-beta-gamma one: a message step costs link.latency_us (alpha),
// moving B bytes costs B / link.bandwidth_gbps (beta), reducing B bytes costs
// B / link.reduce_gbps (gamma). LinkModel's defaults (algorithms/algorithm.h) were measured on the
// development hosts with bench/calibrate; docs/ALGORITHMS.md lists every formula and the
// selection check that validates them against measured times.
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace braid::algorithms::cost {

// Microseconds to move `bytes` over one link (1 GB/s = 1e3 bytes/µs).
inline double Transfer(const LinkModel& link, double bytes) {
  return bytes / 1e3 / link.bandwidth_gbps;
}
// Microseconds to reduce `bytes` into an accumulator, chunk by chunk (pipelined algorithms:
// every chunk is reduced while it is still in the cache).
inline double Reduce(const LinkModel& link, double bytes) { return bytes / 1e3 / link.reduce_gbps; }
// Microseconds to reduce one whole block of `bytes` in a single step (non-pipelined algorithms:
// a block larger than the cache streams from memory). Why it matters: without it, recursive
// halving-doubling always beats the ring on powers of two (fewer steps, the same bytes), while on
// the development hosts the ring measured 10-25% faster once the first halving step's block no
// longer fits in L2 (docs/ALGORITHMS.md, "Selection check").
inline double ReduceBlock(const LinkModel& link, double bytes) {
  return bytes / 1e3 / (bytes > link.cache_bytes ? link.memory_reduce_gbps : link.reduce_gbps);
}

// ceil(log2(n)) for n >= 1 (0 for n == 1).
inline int CeilLog2(int n) {
  int steps = 0;
  while ((1 << steps) < n) ++steps;
  return steps;
}
// floor(log2(n)) for n >= 1.
inline int FloorLog2(int n) {
  int steps = 0;
  while ((2 << steps) <= n) ++steps;
  return steps;
}
// The largest power of two <= n, for n >= 1.
inline int FloorPow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

}  // namespace braid::algorithms::cost
