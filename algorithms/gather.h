// Gather: rank r's args.count elements of sendbuf land as block r of the root's recvbuf.
// In place at the root means sendbuf == recvbuf + root * count (NCCL's offset); recvbuf is only
// touched at the root (NULL elsewhere is fine).
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

// The root receives from every rank at once; every other rank sends one message (gather_direct.cc).
Status DirectGather(const CollectiveContext& ctx, const CollectiveArgs& args);
double DirectGatherCost(const LinkModel& link, int nranks, size_t bytes);

// Binomial tree: log2(n) rounds, inner ranks forward their subtree (gather_binomial.cc).
Status BinomialGather(const CollectiveContext& ctx, const CollectiveArgs& args);
double BinomialGatherCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
