#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective_context.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::algorithms {

// recvbuf = root's sendbuf on every rank, for `count` elements of `type`. Only the root reads
// sendbuf (non-roots may pass nullptr); sendbuf == recvbuf on the root is in place.
Status BinomialBroadcast(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                         size_t count, DataType type, int root);

// Registry adapters (algorithms/registry.cc).
Status RunBinomialBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args);
double BinomialBroadcastCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
