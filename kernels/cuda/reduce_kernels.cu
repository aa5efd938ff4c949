// The kernels behind kernels/cuda/reduce.h: one grid-stride kernel per loop of pack.h,
// instantiated for every element type and op through the host-side dispatch of elementwise.h.
#include <string>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/pack.h"
#include "kernels/cuda/reduce.h"

namespace braid::kernels::cuda {
namespace {

// 512 threads per block and at most 1024 blocks: enough resident warps to saturate HBM on an
// H100 (132 SMs) with grid-stride loops, without launching millions of blocks for large arrays.
constexpr unsigned kThreads = 512;
constexpr size_t kMaxBlocks = 1024;

__device__ __forceinline__ size_t Worker() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t Workers() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

template <typename T, typename Op>
__global__ void ReduceKernel(T* out, T* copy, const T* a, const T* b, size_t count) {
  ReduceShare<T, Op>(out, copy, a, b, count, Worker(), Workers());
}

template <typename T, typename Op>
__global__ void ReduceManyKernel(T* out, Inputs<T> inputs, size_t count) {
  ReduceManyShare<T, Op>(out, inputs, count, Worker(), Workers());
}

template <typename T>
__global__ void DivideKernel(T* buf, size_t count, int divisor) {
  DivideShare<T>(buf, count, divisor, Worker(), Workers());
}

__global__ void CopyKernel(void* dst, const void* src, size_t bytes) {
  CopyShare(dst, src, bytes, Worker(), Workers());
}

// Blocks for `count` elements when a thread takes `per_thread` of them per step (a pack).
unsigned Blocks(size_t count, size_t per_thread) {
  const size_t threads_needed = (count + per_thread - 1) / per_thread;
  size_t blocks = (threads_needed + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

Status LaunchStatus(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status::SystemError(std::string("launching the ") + what + " kernel failed: " +
                             cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

Status CheckPointer(const void* p, size_t alignment, const char* name, const char* what) {
  if (p == nullptr) return Status::InvalidArgument(std::string(what) + ": " + name + " is null");
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    return Status::InvalidArgument(std::string(what) + ": " + name + " is not aligned to its " +
                                   std::to_string(alignment) + "-byte elements");
  }
  return Status::Ok();
}

Status CheckEnums(DataType type, ReduceOp op, const char* what) {
  if (!IsValidDataType(static_cast<int>(type))) {
    return Status::InvalidArgument(std::string(what) + ": invalid datatype " +
                                   std::to_string(static_cast<int>(type)));
  }
  if (!IsValidReduceOp(static_cast<int>(op))) {
    return Status::InvalidArgument(std::string(what) + ": invalid reduction op " +
                                   std::to_string(static_cast<int>(op)));
  }
  return Status::Ok();
}

Status ReduceImpl(DataType type, ReduceOp op, void* out, void* copy, const void* a, const void* b,
                  size_t count, cudaStream_t stream, const char* what) {
  BRAID_RETURN_IF_ERROR(CheckEnums(type, op, what));
  if (count == 0) return Status::Ok();
  const size_t size = DataTypeSize(type);
  BRAID_RETURN_IF_ERROR(CheckPointer(out, size, "the output", what));
  BRAID_RETURN_IF_ERROR(CheckPointer(a, size, "the first input", what));
  BRAID_RETURN_IF_ERROR(CheckPointer(b, size, "the second input", what));
  if (copy != nullptr) BRAID_RETURN_IF_ERROR(CheckPointer(copy, size, "the copy output", what));
  DispatchElement(type, [&](auto element) {
    using T = typename decltype(element)::Type;
    DispatchOp(op, [&](auto functor) {
      using Op = typename decltype(functor)::Type;
      ReduceKernel<T, Op><<<Blocks(count, Pack<T>::kCount), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<T*>(copy), static_cast<const T*>(a),
          static_cast<const T*>(b), count);
    });
  });
  return LaunchStatus(what);
}

}  // namespace

Status LaunchReduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count,
                    cudaStream_t stream) {
  return ReduceImpl(type, op, out, nullptr, a, b, count, stream, "reduce");
}

Status LaunchReduceCopy(DataType type, ReduceOp op, void* out, void* copy, const void* a, const void* b,
                        size_t count, cudaStream_t stream) {
  if (count != 0 && copy == nullptr) return Status::InvalidArgument("reduce-copy: the copy output is null");
  return ReduceImpl(type, op, out, copy, a, b, count, stream, "reduce-copy");
}

Status LaunchReduceMany(DataType type, ReduceOp op, void* out, const void* const* inputs, int n_inputs,
                        size_t count, cudaStream_t stream) {
  BRAID_RETURN_IF_ERROR(CheckEnums(type, op, "reduce-many"));
  if (n_inputs < 1 || n_inputs > kMaxInputs) {
    return Status::InvalidArgument("reduce-many: " + std::to_string(n_inputs) + " inputs (1 to " +
                                   std::to_string(kMaxInputs) + " per launch)");
  }
  if (count == 0) return Status::Ok();
  if (inputs == nullptr) return Status::InvalidArgument("reduce-many: the input list is null");
  const size_t size = DataTypeSize(type);
  BRAID_RETURN_IF_ERROR(CheckPointer(out, size, "the output", "reduce-many"));
  for (int k = 0; k < n_inputs; ++k) {
    const std::string name = "input " + std::to_string(k);
    BRAID_RETURN_IF_ERROR(CheckPointer(inputs[k], size, name.c_str(), "reduce-many"));
  }
  DispatchElement(type, [&](auto element) {
    using T = typename decltype(element)::Type;
    Inputs<T> in{};
    in.count = n_inputs;
    for (int k = 0; k < n_inputs; ++k) in.ptr[k] = static_cast<const T*>(inputs[k]);
    DispatchOp(op, [&](auto functor) {
      using Op = typename decltype(functor)::Type;
      ReduceManyKernel<T, Op><<<Blocks(count, Pack<T>::kCount), kThreads, 0, stream>>>(static_cast<T*>(out), in,
                                                                                       count);
    });
  });
  return LaunchStatus("reduce-many");
}

Status LaunchDivide(DataType type, void* buf, size_t count, int divisor, cudaStream_t stream) {
  if (!IsValidDataType(static_cast<int>(type))) {
    return Status::InvalidArgument("divide: invalid datatype " + std::to_string(static_cast<int>(type)));
  }
  if (divisor < 1) return Status::InvalidArgument("divide: divisor " + std::to_string(divisor) + " < 1");
  if (count == 0 || divisor == 1) return Status::Ok();
  BRAID_RETURN_IF_ERROR(CheckPointer(buf, DataTypeSize(type), "the buffer", "divide"));
  DispatchElement(type, [&](auto element) {
    using T = typename decltype(element)::Type;
    DivideKernel<T><<<Blocks(count, Pack<T>::kCount), kThreads, 0, stream>>>(static_cast<T*>(buf), count,
                                                                           divisor);
  });
  return LaunchStatus("divide");
}

Status LaunchCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return Status::Ok();
  BRAID_RETURN_IF_ERROR(CheckPointer(dst, 1, "the destination", "copy"));
  BRAID_RETURN_IF_ERROR(CheckPointer(src, 1, "the source", "copy"));
  CopyKernel<<<Blocks(bytes, kPackBytes), kThreads, 0, stream>>>(dst, src, bytes);
  return LaunchStatus("copy");
}

}  // namespace braid::kernels::cuda
