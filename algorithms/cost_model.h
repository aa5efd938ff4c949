// Building blocks of the algorithms' cost functions (Algorithm::cost), in one place so that every
// family prices a message step, a transfer and a reduction the same way.
//
// The model is the usual alpha-beta-gamma one: a message step costs link.latency_us (alpha),
// moving B bytes costs B / link.bandwidth_gbps (beta), reducing B bytes costs
// B / link.reduce_gbps (gamma). The numbers come from the calibration (algorithms/calibration.h:
// measured by bench/calibrate); nothing here is a measured constant. docs/ALGORITHMS.md lists
// every formula and the selection check that validates them against measured times, with the
// measurements behind each term below.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

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
// halving-doubling always beats the ring on powers of two (fewer steps, the same bytes), while
// the ring measured faster once the job's buffers passed the L3 (docs/ALGORITHMS.md, "Selection
// check").
inline double ReduceWhole(const LinkModel& link, int n, double message_bytes, double bytes) {
  const bool spills = 2.0 * n * message_bytes > link.cache_bytes;
  return bytes / 1e3 / (spills ? link.memory_reduce_gbps : link.reduce_gbps);
}

// Microseconds to reduce `bytes` that arrive in a message (a non-pipelined algorithm's exchange).
// Where the link reduces on receive and the ranks take turns on the cores, the reduction is fused
// into the receive and priced at the cache rate whatever the buffers' size: with ranks sharing
// cores, rhd measured ahead of the ring beyond the cache once its halving steps reduced on
// receive, where ReduceWhole's memory rate priced it behind. With a core per rank the ring keeps
// both ranks busy and overlaps its reduce-scatter with its allgather chunk by chunk, while a
// whole-message step streams a buffer that outgrew the cache from memory, so ReduceWhole's price
// stands there (and wherever the message lands in scratch first, to be reduced in a separate
// pass). The measurements: docs/ALGORITHMS.md, "Link models"; on a loaded machine the 2-rank
// order reverses, and the model follows the quiet one.
inline double ReduceWhileReceiving(const LinkModel& link, int n, double message_bytes,
                                   double bytes) {
  return link.reduces_on_receive && link.shared_cores ? Reduce(link, bytes)
                                                      : ReduceWhole(link, n, message_bytes, bytes);
}

// The pipelining unit the cost functions assume (BRAID_CHUNK_BYTES' default).
constexpr double kChunkBytes = 512 * 1024;
// Microseconds of reduction a pipelined algorithm cannot hide: `bytes` reduced in steps of
// `step_bytes`, each cut in chunks. Where the link reduces on receive the reduction is part of
// every receive, so all of it counts (at the cache rate). Elsewhere chunk k is reduced while chunk
// k+1 is in flight and only the last chunk of each step is exposed, while a non-pipelined step
// (rhd, rd) reduces after its whole message landed. Why: over TCP at 2 ranks the ring measured
// ahead of rhd from 2 MiB, where a model summing both reductions picked rhd up to 4 MiB
// (docs/ALGORITHMS.md, allreduce). (At 4 ranks the ring also led at 2 MiB with steps of one
// chunk: not modelled.)
inline double PipelinedReduce(const LinkModel& link, double bytes, double step_bytes) {
  if (link.reduces_on_receive) return Reduce(link, bytes);
  const double chunks = step_bytes <= kChunkBytes ? 1.0 : std::ceil(step_bytes / kChunkBytes);
  return Reduce(link, bytes) / chunks;
}

// Microseconds of per-message overhead for `steps` pipelined steps each moving `step_bytes` in
// chunks (non-pipelined algorithms pay link.message_us once per step): what makes a pipelined
// algorithm lose a tie to one that sends whole blocks once its steps take several chunks (at 2
// ranks ring, tree and rhd move the same bytes in the same number of steps, and rhd measured as
// fast as the ring or faster at 2 MiB, the tree slowest).
inline double ChunkMessages(const LinkModel& link, int steps, double step_bytes) {
  const double chunks = step_bytes <= kChunkBytes ? 1.0 : std::ceil(step_bytes / kChunkBytes);
  return steps * chunks * link.message_us;
}

// Microseconds for one rank to send or receive `messages` messages of `bytes` each, each
// pipelined in chunks: the unit the rooted collectives' cost functions count in.
inline double RankShare(const LinkModel& link, int messages, double bytes) {
  return messages * (ChunkMessages(link, 1, bytes) + Transfer(link, bytes));
}
// Microseconds to copy `bytes` in memory (packing, unpacking): at the reduction loops' rate.
inline double Copy(const LinkModel& link, double bytes) { return bytes / 1e3 / link.reduce_gbps; }

// The price of one call of a rooted collective (broadcast, reduce, gather, scatter), given the
// busiest rank's work and all ranks' work together.
//
// Why not the critical path (the tree's depth in message latencies): nothing flows back to the
// root, so the root starts call k+1 as soon as its own part of call k is done, and back-to-back
// calls overlap down the chain or tree. What bounds them is work, not latency: with a core per rank
// the busiest rank's; when ranks take turns on the cores, everybody's, which the cores share.
// With ranks sharing cores, back-to-back broadcasts measured far below one message step each,
// and the chain (broadcast, reduce) and the direct exchange (gather, scatter) ran faster than the
// binomial trees that a critical-path model picked (docs/ALGORITHMS.md, broadcast). Every
// algorithm of a rooted collective makes the same n-1 transfers, so by total work the trees only
// add (their forwarding and packing). What this does not optimise is an isolated small call on many ranks,
// whose time is its path: BRAID_ALGO=<collective>:binomial forces the tree there.
inline double RootedCall(const LinkModel& link, double busiest_rank, double all_ranks) {
  return link.shared_cores ? all_ranks : busiest_rank;
}

// How many ranks' messages go through one host's network link at once in an exchange step whose
// partners are `distance` ranks apart (ranks numbered host by host): every rank of the host where
// the partner is on another host, else 1 (a step inside a host, or a link model of one host).
// Why: a host's ranks share its link, so a step in which all of them send across it takes that
// many times one message's transfer; rhd halves toward its farthest partner first, so its largest
// halves cross hosts from every rank at once (docs/SCALING.md: at 2 hosts x 4 ranks rhd moves 4x
// what the ring moves through each link).
inline double LinkSharers(const LinkModel& link, int distance) {
  const bool across = link.hosts > 1 && link.ranks_per_host > 1 && distance >= link.ranks_per_host;
  return across ? link.ranks_per_host : 1.0;
}

// Whether an exchange with a partner `distance` ranks away (ranks numbered host by host) stays
// inside a host of a job that spans several: the partner is on the same host.
inline bool InsideHost(const LinkModel& link, int distance) {
  return link.hosts > 1 && link.ranks_per_host > 1 && distance < link.ranks_per_host;
}
// The latency of an exchange step whose partners are `distance` ranks apart: shared memory's
// (LinkModel::intra_host_latency_us) where the partner is on the same host of a job that spans
// several, else the link's. Why: pricing every step of rd at the network's latency made its
// steps inside a host (two of three at 2 hosts x 4 ranks) cost a network step each, so one
// direct round looked cheaper than rd across hosts at 8 B, where rd measured 1.5-6x faster
// (docs/SCALING.md, "The selector against the model").
inline double StepLatency(const LinkModel& link, int distance) {
  return InsideHost(link, distance) && link.intra_host_latency_us > 0 ? link.intra_host_latency_us
                                                                      : link.latency_us;
}

// A round of single-copy reads (algorithms/peer_reads.h) in which a rank sends `messages`
// control messages (offers, answers) and reads `reads` blocks of `block` bytes from other
// processes' buffers: two message steps (the offers, then the answers), a fan-out cost per
// message and per read (each read is a system call that pins the owner's pages), and the bytes
// at the measured single-copy rate. Infinite where the links cannot read (peer_read_gbps 0),
// across hosts, or for blocks below the measured crossover (LinkModel::peer_read_min_bytes), so
// the selector keeps today's algorithms wherever this machine's measurement did not favour one
// copy.
inline double PeerReadRound(const LinkModel& link, int messages, int reads, double block) {
  if (link.peer_read_gbps <= 0 || link.hosts > 1 || link.peer_read_min_bytes <= 0 ||
      block < link.peer_read_min_bytes) {
    return std::numeric_limits<double>::infinity();
  }
  return 2 * link.latency_us + (messages + reads) * link.fan_out_us +
         reads * block / 1e3 / link.peer_read_gbps;
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

// Gather and scatter (the same transfers, in opposite directions), `bytes` being the whole
// gathered / scattered buffer, priced by RootedCall.
// Direct: the root exchanges one block with each of the n-1 others; each of those handles one.
inline double DirectBlocksCost(const LinkModel& link, int n, double bytes) {
  const double block = bytes / n;
  return RootedCall(link, RankShare(link, n - 1, block), RankShare(link, 2 * (n - 1), block));
}
// Binomial: ranks renumbered from the root; rank v (v > 0) exchanges its whole subtree,
// min(lowbit(v), n - v) blocks, with its parent in one message, packed in scratch. The root handles
// ceil(log2 n) messages carrying the n-1 other blocks and (un)packs the whole buffer; all ranks
// together move each block once per level it crosses and pack every subtree once.
inline double BinomialBlocksCost(const LinkModel& link, int n, double bytes) {
  const double block = bytes / n;
  double edge_bytes = 0;  // the n-1 subtree messages, summed
  for (int v = 1; v < n; ++v) edge_bytes += std::min(v & -v, n - v) * block;
  // Every message is sliced like a block (the tree runs one chunk of every block at a time).
  const double root =
      ChunkMessages(link, CeilLog2(n), block) + Transfer(link, (n - 1) * block) + Copy(link, bytes);
  const double all = ChunkMessages(link, 2 * (n - 1), block) + 2 * Transfer(link, edge_bytes) +
                     Copy(link, bytes + edge_bytes);
  return RootedCall(link, root, all);
}

}  // namespace braid::algorithms::cost
