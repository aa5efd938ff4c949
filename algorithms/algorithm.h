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
// blocks, docs/ALGORITHMS.md every formula). One model per transport, measured on the
// development hosts (2 vCPU KVM guests) with bench/calibrate; see DefaultLinkModel below.
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
  // Fixed cost of one pipelined chunk message beyond its step's latency (post, match, complete):
  // about an 8-byte exchange on shared memory (0.4-0.6 us measured at 2 ranks before the per-call
  // work; DefaultLinkModel gives shm with a core per rank 0.25).
  double message_us = 0.5;
  // Fixed cost per call of an algorithm built from the pipelined primitives (ring, tree): the
  // FIFOs and per-step bookkeeping that a plain exchange does not set up. Measured at 2 ranks,
  // 8 bytes, where ring and rhd make the same two exchanges: 0.83 against 0.51 us
  // (docs/perf/select_check_all_confirmed_2026-11-23_1628.json); it decides their tie at 2 ranks.
  double pipeline_us = 0.3;
  // Whether the transport combines a received message with the receiver's own data as it lands
  // (Connection::ReducesOnReceive, shared memory). A reducing exchange then makes no separate
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
  // step. Fitted to the direct allreduce against rd (docs/ALGORITHMS.md, allreduce): 1 us on
  // shared memory, 12 us over TCP, where a loopback send delivers the message (and wakes the
  // receiver) in the sender's own time slice.
  double fan_out_us = 1.0;
};

// The measured model of `transport` ("shm", "tcp"; any other name gets TCP's, which is also what
// a default-constructed LinkModel holds).
//
// Measured 2026-11-23 on the development VM (2 vCPU KVM, shared with other builds, so every run
// under `nice -n -19` and the best of 40 short rounds), 2 ranks as processes:
//   bazel build //bench:calibrate
//   BRAID_TRANSPORTS=shm nice -n -19 bazel-bin/bench/calibrate
//   BRAID_TRANSPORTS=tcp nice -n -19 bazel-bin/bench/calibrate
//            one step (us)   exchange GB/s   one-way GB/s   reduce GB/s (512 KiB / 64 MiB)
//   shm      0.9 - 9          1.0 - 1.7       1.6 - 3.2      18 - 36 / 4 - 5
//   tcp      10 - 40          0.6 - 1.1       1.3 - 2.6      20 - 39 / 3 - 8
// The cache budget is half the development hosts' L3 (32 MiB, lscpu): rings, scratch slots and
// the other programs of the host hold the rest (2 ranks: rhd still won at 2 x 2 x 4 MiB, ring at
// 2 x 2 x 8 MiB). The memory rate is the 64 MiB reduce rate above (both transports reduce with
// the same CPU loops). The step latency of shared memory depends on whether every rank has a core:
// ~0.35 us (latency + message; an 8-byte exchange measured 0.31-0.33 us since the per-call fast
// path) when it does, ~8 us when ranks take turns on the cores (the high end of the table).
// The step time swings with the load of the machine (whether a waiting rank keeps its core or
// sleeps); the values below are the ones that place the measured crossovers right with
// bench/select_check.py (docs/ALGORITHMS.md, "Selection check"): latency within the measured
// range, bandwidth the exchange rate (every rank sends at once in every collective), reduction
// the cache-resident rate (pipelined algorithms reduce chunk by chunk).
// `oversubscribed`: some host runs more ranks than it has CPUs; `ranks_per_cpu`: how many on the
// busiest host (only read when oversubscribed; the default is the development hosts' 4 ranks on
// 2 CPUs).
inline LinkModel DefaultLinkModel(const char* transport, bool oversubscribed = true,
                                  double ranks_per_cpu = 2.0) {
  const std::string name = transport == nullptr ? "" : transport;
  LinkModel link = name == "shm" ? LinkModel{oversubscribed ? 8.0 : 0.1, 1.5, 20.0}
                                  : LinkModel{10.0, 1.0, 20.0};
  link.shared_cores = oversubscribed;
  link.ranks_per_cpu = oversubscribed && ranks_per_cpu > 1.0 ? ranks_per_cpu : 1.0;
  link.fan_out_us = name == "shm" ? 1.0 : 12.0;
  if (name == "shm") {
    link.reduces_on_receive = true;
    // A core per rank: one exchange step (latency + message) is an 8-byte rd allreduce,
    // 0.31-0.33 us at 2 ranks (select_check, 16:28); bench/calibrate's step_latency_us 0.24.
    if (!oversubscribed) link.message_us = 0.25;
  }
  return link;
}

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
