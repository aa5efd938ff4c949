#pragma once

#include <cstddef>

#include "algorithms/collective_context.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank. sendbuf may equal
// recvbuf (in place). kAvg divides by ctx.size (integers truncate toward zero).
Status RingAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                     size_t count, DataType type, ReduceOp op);

}  // namespace braid::algorithms
