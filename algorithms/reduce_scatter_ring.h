#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf[i] = op over ranks of sendbuf[rank*count + i], for i < count (args.count is what each
// rank receives; sendbuf holds size*count). In place when recvbuf == sendbuf + rank*count
// elements. kAvg divides by ctx.size (integers truncate toward zero).
Status RingReduceScatter(const CollectiveContext& ctx, const CollectiveArgs& args);

// (n-1)·α + (n-1)/n·B·(1/β + 1/γ), B = the whole send buffer.
double RingReduceScatterCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
