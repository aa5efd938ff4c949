#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

// Barrier (args.kind == kBarrier; buffers and count unused): returns on a rank only after every
// rank has entered it.
Status DisseminationBarrier(const CollectiveContext& ctx, const CollectiveArgs& args);
double DisseminationBarrierCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
