// An algorithm: one way to carry out one collective, with a cost model the selector uses.
//
// Every algorithm is a plain function over a CollectiveContext (connections, scratch, deadline)
// and CollectiveArgs; it never knows which transport carries its messages. Each lives in its own
// file with a "why" block at its head, and is listed once in algorithms/registry.cc.
#pragma once

#include <string>

#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// Link parameters the cost model is evaluated with (algorithms/cost_model.h has the building
// blocks, docs/ALGORITHMS.md every formula). A communicator's model comes from the calibration
// (algorithms/calibration.h: a file bench/calibrate writes, else the built-in table measured on
// the development VMs), one per transport; the initializers below are only round placeholders of
// the right order, for tests and tools that need some model and set what they study.
struct LinkModel {
  double latency_us = 10.0;     // per message step (alpha)
  double bandwidth_gbps = 1.0;  // per link while every rank sends, GB/s (1/beta)
  double reduce_gbps = 20.0;    // CPU reduction throughput, GB/s of result (1/gamma)
  // The last-level cache the ranks of a host share. Once the job's buffers (a send and a receive
  // buffer per rank) outgrow it, a whole-buffer reduction step of a non-pipelined algorithm
  // streams from memory, at memory_reduce_gbps; pipelined algorithms reduce chunk by chunk while
  // each chunk is in the cache and stay at reduce_gbps.
  double cache_bytes = 16.0 * 1024 * 1024;
  double memory_reduce_gbps = 4.5;
  // Fixed cost of one pipelined chunk message beyond its step's latency (post, match, complete).
  double message_us = 0.5;
  // Fixed cost per call of an algorithm built from the pipelined primitives (ring, tree): the
  // FIFOs and per-step bookkeeping that a plain exchange does not set up. It decides the tie of
  // ring and rhd at 2 ranks, where both make the same two exchanges.
  double pipeline_us = 0.3;
  // Whether a received message can be combined with the receiver's own data as it lands: the
  // transport hands pieces over in place (Connection::LandsInPlace, shared memory) and the
  // algorithm's ReduceSink reduces them. A reducing exchange then makes no separate
  // whole-buffer pass over scratch, so its reduction costs the cache rate even where the buffers
  // outgrow the cache (cost::ReduceWhileReceiving).
  bool reduces_on_receive = false;
  // Whether ranks take turns on the CPUs (some host runs more ranks than it has): back-to-back
  // rooted collectives are then bound by the work of all ranks together, not by the busiest
  // rank's (cost::RootedCall).
  bool shared_cores = true;
  // How many ranks share each CPU on the busiest host (1 with a core per rank): where ranks take
  // turns on the cores, work that does not wait on other ranks (a direct algorithm's n-1 sends
  // and reductions) runs that many times slower than on a core of its own.
  double ranks_per_cpu = 1.0;
  // Fixed cost of each message a rank has in flight at once in one step, beyond the step's
  // latency: what a direct algorithm pays n-1 times per rank where a tree pays one message per
  // step (larger over TCP, where a loopback send delivers the message, and wakes the receiver,
  // in the sender's own time slice).
  double fan_out_us = 1.0;
  // The job's shape (algorithms/host_topology.h): how many hosts its ranks run on and the most
  // ranks on any one of them; the default is one host running every rank (0: as many as the
  // call's nranks). Flat algorithms ignore it; it is what lets a cost function price the steps
  // that cross a host's network link apart from those that stay inside a host.
  int hosts = 1;
  int ranks_per_host = 0;
  // The link inside a host, where the job spans several: the numbers above are then the
  // network's (the slowest transport's), and the steps and messages that stay inside a host (the
  // two-level algorithms' phases there, rd's and rhd's steps to a partner on the same host, the
  // direct allreduce's messages to its host's ranks) are priced with these (shared memory's
  // calibration; 0: as the link above).
  double intra_host_latency_us = 0;
  double intra_host_bandwidth_gbps = 0;
  double intra_host_fan_out_us = 0;
  bool intra_host_reduces_on_receive = true;
  // Single-copy reads of a peer's buffer (Connection::ReadPeerMemory; the read family,
  // algorithms/peer_reads.h): the rate at which one rank copies out of another process's memory
  // (the calibration's shm.single_copy_gbps, measured by bench/calibrate), 0 where the job's
  // links are not all shared memory or the rate was not measured or cross-memory attach was
  // refused: the read algorithms then cost infinity (cost::PeerReadRound). peer_read_min_bytes:
  // the measured size from which one copy beats the ring between two processes
  // (shm.single_copy_bytes; where ranks share CPUs the larger of it and
  // single_copy_bytes_shared_cores, as algorithms/single_copy_choice.h decides for the
  // transport); a block below it is not read (0: never).
  double peer_read_gbps = 0;
  double peer_read_min_bytes = 0;
};

using AlgorithmFn = Status (*)(const CollectiveContext& ctx, const CollectiveArgs& args);
// Predicted time in microseconds for `bytes` (CollectiveArgs::MessageBytes) on `nranks` ranks.
using CostFn = double (*)(const LinkModel& link, int nranks, size_t bytes);

struct Algorithm {
  const char* name;  // as spelled in BRAID_ALGO: "ring", "tree", ...
  Collective kind;
  AlgorithmFn run;
  CostFn cost;
};

// The cost model's two cheapest allowed algorithms for one call (algorithms/selector.h,
// RankAlgorithms). `runner_up` is null when only one algorithm is allowed.
struct Ranking {
  const Algorithm* best = nullptr;
  double best_cost = 0;
  const Algorithm* runner_up = nullptr;
  double runner_up_cost = 0;
};

}  // namespace braid::algorithms
