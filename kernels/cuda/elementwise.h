// Element-wise reduction functors for braid's 10 datatypes x 5 ops, compiled by nvcc for the
// GPU kernels (kernels/cuda/reduce_kernels.cu) and by the ordinary C++ compiler for the CPU test
// that checks them against kernels/cpu (tests/kernels/cuda_elementwise_test.cc). One source for
// both, so what CI checks on the CPU is the arithmetic the GPU runs.
//
// Semantics are kernels/cpu/reduce.h's, bit for bit except NaN payloads:
// - integer sum/prod wrap modulo 2^bits (computed in the unsigned type);
// - floating max/min propagate NaN (either input NaN gives NaN) and take b when a and b compare
//   equal, so max(+0, -0) is -0 as on the CPU;
// - float16 / bfloat16 use the native types (__half, __nv_bfloat16) and their intrinsics, which
//   on sm_90 are single correctly rounded instructions. The CPU widens to float, operates and
//   rounds back; for +, * and / that double rounding is innocuous (float's 24-bit significand is
//   at least 2p+2 for p = 11 and 8), so both give the correctly rounded result;
// - kAvg reduces as kSum; DivideBy divides once at the end (float16/bfloat16 through float, as
//   the CPU does, since the divisor is a rank count that half cannot hold exactly past 2048).
// Host-side cuda_fp16.h / cuda_bf16.h are header-only: the CPU test needs the toolkit's headers,
// not a GPU or the CUDA runtime.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/base/datatype.h"

#if defined(__CUDACC__)
#define BRAID_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define BRAID_HOST_DEVICE inline
#endif

namespace braid::kernels::cuda {

template <typename T>
constexpr bool kIsHalfLike = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

struct SumOp {
  template <typename T>
  BRAID_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return __hadd(a, b);
    } else if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <typename T>
  BRAID_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return __hmul(a, b);
    } else if constexpr (std::is_integral_v<T>) {
      // 8- and 16-bit unsigned values promote to int; 255 * 255 cannot overflow it.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// a wins if it is larger (smaller), or NaN; otherwise b, which may itself be NaN.
struct MaxOp {
  template <typename T>
  BRAID_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return (__hgt(a, b) || __hisnan(a)) ? a : b;
    } else if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      return (a > b || a != a) ? a : b;
    }
  }
};

struct MinOp {
  template <typename T>
  BRAID_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return (__hlt(a, b) || __hisnan(a)) ? a : b;
    } else if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      return (a < b || a != a) ? a : b;
    }
  }
};

// x / divisor for kAvg's last step; divisor >= 1. Integers truncate toward zero, computing in int
// for the 8-bit types (a divisor above 255 must not be truncated).
template <typename T>
BRAID_HOST_DEVICE T DivideBy(T x, int divisor) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(__half2float(x) / static_cast<float>(divisor));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(__bfloat162float(x) / static_cast<float>(divisor));
  } else if constexpr (std::is_integral_v<T>) {
    using C = std::common_type_t<T, int>;
    return static_cast<T>(static_cast<C>(x) / static_cast<C>(divisor));
  } else {
    return x / static_cast<T>(divisor);
  }
}

// Host-side dispatch from the enums to the templates: f(Tag<T>{}) with T the element type of
// `type` (or the functor of `op`), so a C++17 generic lambda reads the type as
// `typename decltype(tag)::Type`. Returns false, calling nothing, for an invalid enum value.
template <typename T>
struct Tag {
  using Type = T;
};

template <typename F>
bool DispatchElement(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8: f(Tag<int8_t>{}); return true;
    case DataType::kUint8: f(Tag<uint8_t>{}); return true;
    case DataType::kInt32: f(Tag<int32_t>{}); return true;
    case DataType::kUint32: f(Tag<uint32_t>{}); return true;
    case DataType::kInt64: f(Tag<int64_t>{}); return true;
    case DataType::kUint64: f(Tag<uint64_t>{}); return true;
    case DataType::kFloat16: f(Tag<__half>{}); return true;
    case DataType::kFloat32: f(Tag<float>{}); return true;
    case DataType::kFloat64: f(Tag<double>{}); return true;
    case DataType::kBfloat16: f(Tag<__nv_bfloat16>{}); return true;
  }
  return false;
}

template <typename F>
bool DispatchOp(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: f(Tag<SumOp>{}); return true;
    case ReduceOp::kProd: f(Tag<ProdOp>{}); return true;
    case ReduceOp::kMax: f(Tag<MaxOp>{}); return true;
    case ReduceOp::kMin: f(Tag<MinOp>{}); return true;
  }
  return false;
}

}  // namespace braid::kernels::cuda
