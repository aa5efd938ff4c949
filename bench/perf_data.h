// The data every *_perf program sends and the results it expects: input patterns whose
// reductions are exact in every datatype, whatever order an algorithm combines the ranks in,
// and the comparison that counts wrong elements (nccl-tests' #wrong column).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bindings/c/braid.h"

namespace braid::bench {

// Reductions: rank `rank`'s input element i for `op` (a small integer, see perf_data.cc),
// and the exact result of reducing all ranks' inputs with braid's semantics (integers wrap;
// avg divides the sum once, truncating integers toward zero and rounding floating types in
// their own precision). `seed` varies the pattern between checks. FillReduceExpected writes
// the result's elements [first, first + count) (reduce-scatter checks one block of it).
void FillReduceInput(braidDataType_t type, braidRedOp_t op, int rank, uint64_t seed, void* buf,
                     size_t count);
void FillReduceExpected(braidDataType_t type, braidRedOp_t op, int nranks, uint64_t seed,
                        void* buf, size_t count, size_t first = 0);
// Non-reductions (broadcast, gathers, scatter, send/recv): element i of rank `rank`'s data.
// Values are small integers (exact in every type) from a hash of (rank, i, seed), so a block
// delivered to the wrong place or shifted by any number of elements shows up as wrong.
void FillRankData(braidDataType_t type, int rank, uint64_t seed, void* buf, size_t count);
// All-to-all: the block rank `src` sends to rank `dst`.
void FillBlockData(braidDataType_t type, int src, int dst, uint64_t seed, void* buf,
                   size_t count);

// Number of elements of `got` that differ from `expected`. Exact, except that floating avg
// allows 2 units in the last place (an implementation may scale by 1/n instead of dividing).
int64_t CountWrong(braidDataType_t type, braidRedOp_t op, const void* got, const void* expected,
                   size_t count);

}  // namespace braid::bench
