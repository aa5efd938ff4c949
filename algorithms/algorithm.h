// An algorithm: one way to carry out one collective, with a cost model the selector uses.
//
// Every algorithm is a plain function over a CollectiveContext (connections, scratch, deadline)
// and CollectiveArgs; it never knows which transport carries its messages. Each lives in its own
// file with a "why" block at its head, and is listed once in algorithms/registry.cc.
#pragma once

#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/status.h"

namespace braid::algorithms {

// Link parameters the cost model is evaluated with (see algorithms/cost_model.h).
struct LinkModel {
  double latency_us = 30.0;            // per message step (alpha)
  double bandwidth_gbps = 2.0;         // per link, GB/s (1/beta)
  double reduce_gbps = 10.0;           // CPU reduction throughput, GB/s (1/gamma)
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

}  // namespace braid::algorithms
