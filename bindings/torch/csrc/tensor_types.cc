#include "tensor_types.h"

#include <c10/util/Exception.h>

namespace braid_torch {

void CheckDense(const at::Tensor& tensor, const std::string& what) {
  TORCH_CHECK(tensor.defined(), "braid: ", what, " is an undefined tensor");
  TORCH_CHECK(tensor.device().is_cpu() || tensor.device().is_cuda(), "braid: ", what, " is on ",
              tensor.device().str(), ": braid's torch backend serves CPU and CUDA tensors");
  TORCH_CHECK(tensor.layout() == at::kStrided, "braid: ", what, " is a ", tensor.layout(),
              " tensor; braid moves dense (strided) tensors only");
}

void CheckDense(const std::vector<at::Tensor>& tensors, const std::string& what) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckDense(tensors[i], what + "[" + std::to_string(i) + "]");
  }
}

void CopyBytes(at::Tensor& to, int64_t to_offset, const at::Tensor& from, int64_t from_offset,
               int64_t bytes) {
  if (bytes == 0) return;
  at::Tensor target = to.view({-1}).view(at::kByte).narrow(0, to_offset, bytes);
  target.copy_(from.view({-1}).view(at::kByte).narrow(0, from_offset, bytes));
}

namespace {

std::optional<braidDataType_t> BraidType(at::ScalarType dtype) {
  switch (dtype) {
    case at::kChar: return braidInt8;
    case at::kByte: return braidUint8;
    case at::kBool: return braidUint8;
    case at::kInt: return braidInt32;
    case at::kUInt32: return braidUint32;
    case at::kLong: return braidInt64;
    case at::kUInt64: return braidUint64;
    case at::kHalf: return braidFloat16;
    case at::kFloat: return braidFloat32;
    case at::kDouble: return braidFloat64;
    case at::kBFloat16: return braidBfloat16;
    default: return std::nullopt;
  }
}

}  // namespace

void Reduction::Premultiply(at::Tensor& buffer) const {
  if (factor_tensor.defined()) {
    buffer.mul_(factor_tensor);
  } else if (factor.has_value()) {
    buffer.mul_(*factor);
  }
}

Reduction ResolveReduction(at::ScalarType dtype, const c10d::ReduceOp& op, const std::string& what) {
  std::optional<braidDataType_t> type = BraidType(dtype);
  TORCH_CHECK(type.has_value(), "braid: ", what, " cannot reduce tensors of dtype ", dtype,
              ": braid reduces int8, uint8, bool, int32, uint32, int64, uint64, float16, "
              "bfloat16, float32 and float64 (other dtypes can be broadcast, gathered and sent)");
  Reduction reduction;
  reduction.type = *type;
  const bool is_bool = dtype == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: reduction.op = is_bool ? braidMax : braidSum; break;
    case c10d::ReduceOp::PRODUCT: reduction.op = is_bool ? braidMin : braidProd; break;
    case c10d::ReduceOp::MIN: reduction.op = braidMin; break;
    case c10d::ReduceOp::MAX: reduction.op = braidMax; break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, "braid: ", what, ": ReduceOp.AVG is not defined for bool tensors");
      reduction.op = braidAvg;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(!is_bool, "braid: ", what, ": PREMUL_SUM is not defined for bool tensors");
      reduction.op = braidSum;
      // The long-standing name: torch 2.15 renamed the struct PreMulSumSupplement and keeps this
      // one as an alias, torch 2.11 (the GPU machine's) has only this one.
      auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "braid: ", what, ": PREMUL_SUM without a factor");
      if (supplement->tensor_factor.defined()) {
        CheckDense(supplement->tensor_factor, what + " PREMUL_SUM factor");
        reduction.factor_tensor = supplement->tensor_factor;
      } else {
        reduction.factor = supplement->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK(false, "braid: ", what, ": reduce op ", static_cast<int>(op.op_),
                  " (BAND, BOR and BXOR) is not offered by braid; it has SUM, PRODUCT, MIN, MAX, "
                  "AVG and PREMUL_SUM");
  }
  return reduction;
}

at::Tensor FlattenBytes(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> pieces;
  pieces.reserve(tensors.size());
  for (const at::Tensor& t : tensors) pieces.push_back(t.contiguous().view({-1}).view(at::kByte));
  if (pieces.empty()) return at::empty({0}, at::kByte);
  return at::cat(pieces);
}

size_t UnflattenBytes(const at::Tensor& flat, size_t offset, std::vector<at::Tensor>& tensors) {
  for (at::Tensor& t : tensors) {
    const int64_t bytes = static_cast<int64_t>(Bytes(t));
    at::Tensor piece = flat.narrow(0, static_cast<int64_t>(offset), bytes);
    // Viewing bytes as a wider type needs the piece aligned to it (mixed dtypes may not be).
    if (offset % t.element_size() != 0) piece = piece.clone();
    t.copy_(piece.view(t.scalar_type()).view(t.sizes()));
    offset += bytes;
  }
  return offset;
}

}  // namespace braid_torch
