// CPU reduction kernels: elementwise out = a op b for every braid DataType x ReduceOp.
//
// The algorithms call these on host buffers between transport steps (recv-reduce-send), so the
// loops are written to vectorize: one plain loop per dtype x op, compiled with -O3 and cloned
// for AVX2 (target_clones picks the variant once, at load time); float16/bfloat16 have AVX2+F16C
// intrinsic loops chosen at run time. Dtype and op stay enums here so no template leaks upward.
// Thread safety: stateless; any number of threads may call these at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/datatype.h"
#include "kernels/cpu/half.h"  // HalfToFloat, FloatToHalf, Bfloat16ToFloat, FloatToBfloat16

namespace braid::kernels {

// out[i] = a[i] op b[i] for i < count.
//
// Aliasing: `out` may be exactly `a` or exactly `b` (or both); partial overlap is not allowed.
// `a` and `b` may be the same buffer. count == 0 touches nothing.
// Semantics per op:
// - kSum / kProd on integers wrap modulo 2^bits (computed in the unsigned type).
// - kAvg reduces as kSum; the caller divides once at the end with DivideInPlace.
// - kMax / kMin on floating types propagate NaN: if either input is NaN the result is NaN
//   (as torch.maximum/minimum), so the result does not depend on the order in which ranks
//   combine. Signed zeros compare equal: max(+0, -0) returns b.
// - float16 / bfloat16: both inputs convert to float, the op runs in float, the result rounds
//   back to nearest even (so a chain of reductions rounds once per step, like NCCL's).
// Preconditions: `type` and `op` are valid enum values (callers validate at the API boundary);
// an invalid value leaves `out` untouched.
void ReduceInto(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count);

// buf[i] = buf[i] / divisor.
// Integers truncate toward zero (C++ division); float and double divide in their own precision;
// float16 / bfloat16 convert to float, divide, and round back to nearest even.
// Preconditions: divisor >= 1 (the communicator size); any other value leaves buf untouched.
void DivideInPlace(DataType type, void* buf, size_t count, int divisor);

}  // namespace braid::kernels
