// Scatter: block r (args.count elements) of the root's sendbuf lands in rank r's recvbuf.
// In place at the root means recvbuf == sendbuf + root * count (NCCL's offset); sendbuf is only
// read at the root (NULL elsewhere is fine).
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

// The root sends to every rank at once; every other rank receives one message (scatter_direct.cc).
Status DirectScatter(const CollectiveContext& ctx, const CollectiveArgs& args);
double DirectScatterCost(const LinkModel& link, int nranks, size_t bytes);

// Binomial tree: log2(n) rounds, inner ranks forward their subtree (scatter_binomial.cc).
Status BinomialScatter(const CollectiveContext& ctx, const CollectiveArgs& args);
double BinomialScatterCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
