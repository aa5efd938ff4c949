#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// The root's recvbuf[i] = op over ranks of sendbuf[i], for i < args.count. Only the root writes
// recvbuf (non-roots may pass nullptr); sendbuf == recvbuf on the root is in place. kAvg divides
// by ctx.size (integers truncate toward zero). Registered as reduce "ring".
Status ChainReduce(const CollectiveContext& ctx, const CollectiveArgs& args);

// (n-1)·α + (B + (n-2)·min(B, chunk))·(1/β + 1/γ): one chunk per hop fills the chain, then B
// streams through, reduced once per hop.
double ChainReduceCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
