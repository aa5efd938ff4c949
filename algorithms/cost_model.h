// Building blocks of the algorithms' cost functions (Algorithm::cost), in one place so that every
// family prices a message step, a transfer and a reduction the same way.
//
// The model is the usual alpha-beta-gamma one: a message step costs link.latency_us (alpha),
// moving B bytes costs B / link.bandwidth_gbps (beta), reducing B bytes costs
// B / link.reduce_gbps (gamma). LinkModel's defaults (algorithms/algorithm.h) were measured on the
// development hosts with bench/calibrate; docs/ALGORITHMS.md lists every formula and the
// selection check that validates them against measured times.
#pragma once

#include <cmath>
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
// Microseconds to reduce `bytes` in whole-buffer steps (non-pipelined algorithms) on a job of
// `n` ranks whose buffers are `message_bytes` each: at memory speed once the job's send and
// receive buffers outgrow the shared cache. Why it matters: without it, recursive
// halving-doubling always beats the ring on powers of two (fewer steps, the same bytes), while on
// the development hosts the ring measured 10-25% faster once 2 n message_bytes passed the 32 MiB
// L3 (docs/ALGORITHMS.md, "Selection check").
inline double ReduceWhole(const LinkModel& link, int n, double message_bytes, double bytes) {
  const bool spills = 2.0 * n * message_bytes > link.cache_bytes;
  return bytes / 1e3 / (spills ? link.memory_reduce_gbps : link.reduce_gbps);
}

// The pipelining unit the cost functions assume (BRAID_CHUNK_BYTES' default).
constexpr double kChunkBytes = 512 * 1024;
// Microseconds of per-message overhead for `steps` pipelined steps each moving `step_bytes` in
// chunks (non-pipelined algorithms pay link.message_us once per step): what makes a pipelined
// algorithm lose a tie to one that sends whole blocks once its steps take several chunks (at 2
// ranks ring, tree and rhd move the same bytes in the same number of steps; at 2 MiB rhd measured
// as fast as the ring or faster, the tree slowest).
inline double ChunkMessages(const LinkModel& link, int steps, double step_bytes) {
  const double chunks = step_bytes <= kChunkBytes ? 1.0 : std::ceil(step_bytes / kChunkBytes);
  return steps * chunks * link.message_us;
}

// Microseconds of one rank's share of a rooted collective (broadcast, reduce) that sends or
// receives `messages` whole buffers of `bytes`, pipelined in chunks.
//
// Why rooted collectives are priced by their busiest rank and not by their critical path: nothing
// flows back to the root, so the root starts call k+1 as soon as its own part of call k is done and
// back-to-back calls overlap down the chain or tree. What limits them is the rank with the most
// work per call. Measured (bench/select_check.py, 4 ranks over shared memory, 2026-11-23): 0.5 us
// per 8-byte broadcast while one message step costs 1-8 us; and up to 2 MiB, where the
// path-latency model picked the binomial tree, the chain was faster at 9 of 12 sizes (by up to
// 52%) and never more than 6% slower. The price: an isolated small call on many ranks,
// whose time is its path (n-1 steps for the chain), is not what is optimised;
// BRAID_ALGO=broadcast:binomial gives the tree's ceil(lg n) steps there (docs/ALGORITHMS.md).
inline double RankShare(const LinkModel& link, int messages, double bytes) {
  return messages * (ChunkMessages(link, 1, bytes) + Transfer(link, bytes));
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
