// How torch tensors, dtypes and ReduceOps map onto braid.h's buffers, types and operations.
// Every refusal is a c10::Error (ValueError/RuntimeError in Python) raised on the calling thread,
// before anything is queued, with a message naming the tensor, its device or dtype, and the op.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "bindings/c/braid.h"

namespace braid_torch {

// braid serves dense (strided) CPU and CUDA tensors: anything else is refused with a message
// naming `what` (e.g. "allreduce input") and the tensor's device or layout. That all of one
// call's tensors share a device is CallDevice's check (device_streams.h).
void CheckDense(const at::Tensor& tensor, const std::string& what);
void CheckDense(const std::vector<at::Tensor>& tensors, const std::string& what);

// A reduction as braid runs it. Bool tensors reduce as uint8 with SUM as MAX and PRODUCT as MIN
// (logical or / and), as NCCL does. PREMUL_SUM multiplies by `factor` (a double or a one-element
// tensor) before a SUM.
struct Reduction {
  braidDataType_t type = braidFloat32;
  braidRedOp_t op = braidSum;
  std::optional<double> factor;
  at::Tensor factor_tensor;  // defined instead of `factor` for a tensor factor
  // Multiplies `buffer` in place by the PREMUL_SUM factor, if any.
  void Premultiply(at::Tensor& buffer) const;
  bool premultiplies() const { return factor.has_value() || factor_tensor.defined(); }
};
// Refuses dtypes braid cannot reduce (complex, int16, float8...) and ops it does not have
// (BAND, BOR, BXOR), naming them and what braid offers instead.
Reduction ResolveReduction(at::ScalarType dtype, const c10d::ReduceOp& op, const std::string& what);

// Total bytes of a tensor's elements.
inline size_t Bytes(const at::Tensor& tensor) { return tensor.numel() * tensor.element_size(); }

// A contiguous tensor with `tensor`'s values: `tensor` itself when already contiguous.
inline at::Tensor Contiguous(const at::Tensor& tensor) { return tensor.contiguous(); }
// After writing into `staged` (from Contiguous(tensor)): copies back unless it is `tensor`.
inline void CopyBack(const at::Tensor& staged, at::Tensor& tensor) {
  if (!staged.is_same(tensor)) tensor.copy_(staged);
}

// Copies `bytes` bytes of contiguous `from` at byte `from_offset` into contiguous `to` at byte
// `to_offset`, on their device (the current stream for CUDA).
void CopyBytes(at::Tensor& to, int64_t to_offset, const at::Tensor& from, int64_t from_offset,
               int64_t bytes);

// The elements of `tensors` one after another, as raw bytes (any mix of dtypes).
at::Tensor FlattenBytes(const std::vector<at::Tensor>& tensors);
// Copies consecutive pieces of `flat` (bytes, as FlattenBytes laid them out) into `tensors`,
// starting at byte `offset`; returns the offset after the last.
size_t UnflattenBytes(const at::Tensor& flat, size_t offset, std::vector<at::Tensor>& tensors);

}  // namespace braid_torch
