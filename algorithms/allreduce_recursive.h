#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective_context.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank, bitwise identical on
// every rank. sendbuf may equal recvbuf (in place). kAvg divides by ctx.size (integers truncate).

// Recursive doubling: log2 steps exchanging the whole buffer ("rd").
Status RecursiveDoublingAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                                  size_t count, DataType type, ReduceOp op);
// Recursive halving reduce-scatter + recursive doubling allgather, Rabenseifner's ("rhd").
Status RecursiveHalvingDoublingAllReduce(const CollectiveContext& ctx, const void* sendbuf,
                                         void* recvbuf, size_t count, DataType type, ReduceOp op);

// Registry adapters (algorithms/registry.cc).
Status RunRecursiveDoublingAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args);
double RecursiveDoublingAllReduceCost(const LinkModel& link, int nranks, size_t bytes);
Status RunRecursiveHalvingDoublingAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args);
double RecursiveHalvingDoublingAllReduceCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
