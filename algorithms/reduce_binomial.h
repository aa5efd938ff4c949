#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective_context.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf on `root` = op over ranks of sendbuf, for `count` elements of `type`. Only the root
// writes recvbuf (non-roots may pass nullptr); sendbuf == recvbuf on the root is in place.
// kAvg divides once, on the root, by ctx.size.
Status BinomialReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                      size_t count, DataType type, ReduceOp op, int root);

// Registry adapters (algorithms/registry.cc).
Status RunBinomialReduce(const CollectiveContext& ctx, const CollectiveArgs& args);
double BinomialReduceCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
