#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf[r*count .. (r+1)*count) = rank r's sendbuf[0 .. count), on every rank (args.count is
// what each rank contributes). In place when sendbuf == recvbuf + rank*count elements.
Status RingAllGather(const CollectiveContext& ctx, const CollectiveArgs& args);

// (n-1)·α + (n-1)/n·B/β, B = the gathered buffer.
double RingAllGatherCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
