// Datatypes and reduction operators, with values equal to braid.h's enums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

enum class DataType : int {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9,
};
constexpr int kNumDataTypes = 10;

enum class ReduceOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
constexpr int kNumReduceOps = 5;

inline bool IsValidDataType(int t) { return t >= 0 && t < kNumDataTypes; }
inline bool IsValidReduceOp(int op) { return op >= 0 && op < kNumReduceOps; }

// Bytes per element (0 for an invalid type). Inline: a small collective asks several times per
// call (argument checks, message sizes, kernels), and the call cost more than the lookup.
inline size_t DataTypeSize(DataType type) {
  constexpr unsigned char kSizes[kNumDataTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  const int i = static_cast<int>(type);
  return IsValidDataType(i) ? kSizes[i] : 0;
}
// nccl-tests' spelling: "int8", "uint8", "int32", ..., "half", "float", "double", "bfloat16".
const char* DataTypeName(DataType type);
// "sum", "prod", "max", "min", "avg".
const char* ReduceOpName(ReduceOp op);
// Parses the names above (and a few aliases such as "float32", "fp16"); false if unknown.
bool ParseDataType(const char* name, DataType* out);
bool ParseReduceOp(const char* name, ReduceOp* out);

}  // namespace braid
