#include "core/base/datatype.h"

#include <cstring>

namespace braid {
namespace {

struct TypeInfo {
  DataType type;
  const char* name;
  const char* alias;
};

constexpr TypeInfo kTypes[kNumDataTypes] = {
    {DataType::kInt8, "int8", "char"},
    {DataType::kUint8, "uint8", "uchar"},
    {DataType::kInt32, "int32", "int"},
    {DataType::kUint32, "uint32", "uint"},
    {DataType::kInt64, "int64", "long"},
    {DataType::kUint64, "uint64", "ulong"},
    {DataType::kFloat16, "half", "float16"},
    {DataType::kFloat32, "float", "float32"},
    {DataType::kFloat64, "double", "float64"},
    {DataType::kBfloat16, "bfloat16", "bf16"},
};

constexpr const char* kOpNames[kNumReduceOps] = {"sum", "prod", "max", "min", "avg"};

}  // namespace

const char* DataTypeName(DataType type) {
  int i = static_cast<int>(type);
  return IsValidDataType(i) ? kTypes[i].name : "invalid";
}

const char* ReduceOpName(ReduceOp op) {
  int i = static_cast<int>(op);
  return IsValidReduceOp(i) ? kOpNames[i] : "invalid";
}

bool ParseDataType(const char* name, DataType* out) {
  for (const TypeInfo& info : kTypes) {
    if (std::strcmp(name, info.name) == 0 || std::strcmp(name, info.alias) == 0) {
      *out = info.type;
      return true;
    }
  }
  if (std::strcmp(name, "fp16") == 0) { *out = DataType::kFloat16; return true; }
  return false;
}

bool ParseReduceOp(const char* name, ReduceOp* out) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (std::strcmp(name, kOpNames[i]) == 0) {
      *out = static_cast<ReduceOp>(i);
      return true;
    }
  }
  return false;
}

}  // namespace braid
