#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf = the root's sendbuf on every rank, for args.count elements. Only the root reads
// sendbuf (non-roots may pass nullptr); sendbuf == recvbuf on the root is in place.
// Registered as broadcast "ring".
Status ChainBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args);

// (n-1)·α + B/β + (n-2)·min(B, chunk)/β: the chain fills one chunk per hop, then streams B.
double ChainBroadcastCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
