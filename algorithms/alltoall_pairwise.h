#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

// All-to-all (args.kind == kAllToAll): block p of rank r's sendbuf (args.count elements) ends up
// as block r of rank p's recvbuf. sendbuf may equal recvbuf (in place).
Status PairwiseAllToAll(const CollectiveContext& ctx, const CollectiveArgs& args);
double PairwiseAllToAllCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
