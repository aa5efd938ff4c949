#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective_context.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank, bitwise identical on
// every rank, in two rounds ("twoshot"): a direct reduce-scatter (every rank sends each peer the
// peer's shard and reduces its own shard as the peers' pieces land), then a direct all-gather of
// the reduced shards. sendbuf may equal recvbuf (in place). kAvg divides by ctx.size (integers
// truncate).
Status TwoShotAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                        size_t count, DataType type, ReduceOp op);

// Registry adapter and cost function (algorithms/registry.cc).
Status RunTwoShotAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args);
double TwoShotAllReduceCost(const LinkModel& link, int n, size_t bytes);

}  // namespace braid::algorithms
