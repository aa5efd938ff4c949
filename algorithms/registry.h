// Every algorithm braid has, per collective. The selector chooses among them; BRAID_ALGO can force
// or exclude any by name.
#pragma once

#include <vector>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

// All algorithms, grouped by collective; within a collective the first is the fallback when the
// cost model has nothing better to say.
const std::vector<Algorithm>& Algorithms();

// nullptr if `kind` has no algorithm called `name`.
const Algorithm* FindAlgorithm(Collective kind, const char* name);

}  // namespace braid::algorithms
