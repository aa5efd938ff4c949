// Datatypes and reduction ops in nccl-tests' spelling, and the bench's own float16 / bfloat16
// conversions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bindings/c/braid.h"

namespace braid::bench {

size_t TypeSize(braidDataType_t type);       // 0 for a value outside braidDataType_t
const char* TypeName(braidDataType_t type);  // "int8" ... "half", "float", "double", "bfloat16"
const char* OpName(braidRedOp_t op);         // "sum", "prod", "max", "min", "avg"
bool IsFloatingType(braidDataType_t type);

// IEEE float16 / bfloat16 <-> float, round-to-nearest-even. The bench's own (deliberately not
// braid's kernels), so a conversion bug in braid cannot hide itself in the check.
uint16_t BenchFloatToHalf(float f);
float BenchHalfToFloat(uint16_t h);
uint16_t BenchFloatToBfloat16(float f);
float BenchBfloat16ToFloat(uint16_t b);

}  // namespace braid::bench
