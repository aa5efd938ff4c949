// CUDA reduction and copy kernels on a stream, for every braid DataType x ReduceOp.
//
// What the device path enqueues between transfers: each call launches one kernel on `stream` and
// returns without waiting (NCCL's stream semantics). The element-wise arithmetic is
// kernels/cuda/elementwise.h's and the loop shape (16-byte packs, scalar head and tail)
// kernels/cuda/pack.h's; results equal kernels/cpu/reduce.h's bit for bit except NaN payloads.
// Dtype and op stay enums here, as in kernels/cpu, so no template leaks upward.
//
// Errors: an invalid dtype, op or divisor, a pointer not aligned to its element size (the GPU
// would fault on it) or a null pointer with a non-zero count is kInvalidArgument, checked before
// anything is enqueued; a failed launch is kSystemError naming the CUDA error. Errors of the
// kernel's execution surface later, on the stream. count == 0 enqueues nothing.
// Thread safety: stateless; any thread may call these for any stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::kernels::cuda {

// out[i] = a[i] op b[i] for i < count (kAvg reduces as kSum; see LaunchDivide). out may be
// exactly a or b; partial overlap is not allowed. All three are device-accessible.
Status LaunchReduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count,
                    cudaStream_t stream);

// As LaunchReduce, and copy[i] = out[i] as well (a reduced chunk kept and forwarded at once).
Status LaunchReduceCopy(DataType type, ReduceOp op, void* out, void* copy, const void* a, const void* b,
                        size_t count, cudaStream_t stream);

// out[i] = inputs[0][i] op inputs[1][i] op ... op inputs[n-1][i], folded left in input order
// (one-shot allreduce: each rank reduces every peer's chunk; every rank folds in the same order
// and gets the same bits). 1 <= n_inputs <= 8; out may be exactly one of the inputs.
Status LaunchReduceMany(DataType type, ReduceOp op, void* out, const void* const* inputs, int n_inputs,
                        size_t count, cudaStream_t stream);

// buf[i] = buf[i] / divisor (kAvg's last step; divisor >= 1, the communicator size).
Status LaunchDivide(DataType type, void* buf, size_t count, int divisor, cudaStream_t stream);

// dst[i] = src[i] for `bytes` bytes, in 16-byte packs where both allow it; no overlap.
Status LaunchCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace braid::kernels::cuda
