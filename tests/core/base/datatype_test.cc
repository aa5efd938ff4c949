// core/base/datatype.h: datatype sizes, nccl-tests names, parsing and validation of dtypes and ops.
#include "core/base/datatype.h"

#include <catch2/catch.hpp>

#include <string>

namespace braid {

TEST_CASE("datatypes and ops: sizes and nccl-tests names", "[core]") {
  CHECK(DataTypeSize(DataType::kInt8) == 1);
  CHECK(DataTypeSize(DataType::kFloat16) == 2);
  CHECK(DataTypeSize(DataType::kBfloat16) == 2);
  CHECK(DataTypeSize(DataType::kUint32) == 4);
  CHECK(DataTypeSize(DataType::kFloat64) == 8);
  CHECK(std::string(DataTypeName(DataType::kFloat32)) == "float");
  CHECK(std::string(DataTypeName(DataType::kFloat16)) == "half");
  DataType t;
  CHECK(ParseDataType("bfloat16", &t));
  CHECK(t == DataType::kBfloat16);
  CHECK(ParseDataType("float32", &t));
  CHECK(t == DataType::kFloat32);
  CHECK_FALSE(ParseDataType("complex", &t));
  ReduceOp op;
  CHECK(ParseReduceOp("avg", &op));
  CHECK(op == ReduceOp::kAvg);
  CHECK_FALSE(ParseReduceOp("xor", &op));
  CHECK_FALSE(IsValidDataType(10));
  CHECK_FALSE(IsValidReduceOp(-1));
}

}  // namespace braid
