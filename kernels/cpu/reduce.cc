#include "kernels/cpu/reduce.h"

#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(BRAID_KERNEL_NO_CLONES)
#define BRAID_KERNEL_X86_AVX2 1
#include <immintrin.h>
#endif

namespace braid::kernels {
namespace {

// One AVX2 clone and one baseline (x86-64 SSE2) clone of every hot loop; the dynamic loader
// resolves each once. Elsewhere (other ISAs) the loops are compiled once for the baseline.
// BRAID_KERNEL_NO_CLONES builds the baseline only, without clones or the AVX2 intrinsics below
// (a test target uses it to cover that path on AVX2 hosts).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(BRAID_KERNEL_NO_CLONES)
#define BRAID_KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BRAID_KERNEL_CLONES
#endif
#define BRAID_ALWAYS_INLINE inline __attribute__((always_inline))

// ---- Element operations -----------------------------------------------------------------------
// Integer sum/prod go through the unsigned type: wrapping there is defined, and the bit pattern
// equals two's-complement wrapping of the signed type.

struct SumOp {
  template <typename T>
  static BRAID_ALWAYS_INLINE T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <typename T>
  static BRAID_ALWAYS_INLINE T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // uint8 promotes to int for the multiply; 255 * 255 cannot overflow int.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// Floating max/min: NaN in either input gives NaN (see reduce.h). Written as selects over
// bitwise-or'd comparisons so GCC if-converts and vectorizes them.
struct MaxOp {
  template <typename T>
  static BRAID_ALWAYS_INLINE T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      const bool take_a = (a > b) | (a != a);  // a is larger, or a is NaN; else b (maybe NaN)
      return take_a ? a : b;
    }
  }
};

struct MinOp {
  template <typename T>
  static BRAID_ALWAYS_INLINE T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      const bool take_a = (a < b) | (a != a);
      return take_a ? a : b;
    }
  }
};

// ---- Loop bodies ------------------------------------------------------------------------------
// No __restrict: out may equal a or b. GCC versions the loop with a dependence-distance check
// that lets distance 0 (exact aliasing) take the vector path.

template <typename T, typename Op>
BRAID_ALWAYS_INLINE void NativeLoop(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = Op::Apply(x[i], y[i]);
}

struct HalfCodec {
  static BRAID_ALWAYS_INLINE float Load(uint16_t v) { return HalfToFloat(v); }
  static BRAID_ALWAYS_INLINE uint16_t Store(float v) { return FloatToHalf(v); }
};
struct Bfloat16Codec {
  static BRAID_ALWAYS_INLINE float Load(uint16_t v) { return Bfloat16ToFloat(v); }
  static BRAID_ALWAYS_INLINE uint16_t Store(float v) { return FloatToBfloat16(v); }
};

template <typename Codec, typename Op>
BRAID_ALWAYS_INLINE void ViaFloatLoop(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    o[i] = Codec::Store(Op::Apply(Codec::Load(x[i]), Codec::Load(y[i])));
  }
}

template <typename T>
BRAID_ALWAYS_INLINE void NativeDivide(void* buf, size_t n, int divisor) {
  T* p = static_cast<T*>(buf);
  if constexpr (std::is_integral_v<T>) {
    // Integer division has no SIMD form on x86; this runs once per avg collective. C is int for
    // the 8-bit types (a divisor above 255 must not be truncated) and T itself otherwise; the
    // divisor is >= 1, so its conversion is exact and INT_MIN / -1 cannot happen.
    using C = std::common_type_t<T, int>;
    const C d = static_cast<C>(divisor);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<C>(p[i]) / d);
  } else {
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
  }
}

template <typename Codec>
BRAID_ALWAYS_INLINE void ViaFloatDivide(void* buf, size_t n, int divisor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = Codec::Store(Codec::Load(p[i]) / d);
}

// ---- Non-template entry points, one per dtype x op, each cloned -------------------------------
// (target_clones wants ordinary functions; templates would be COMDAT and clash with ifuncs.)

using ReduceFn = void (*)(void*, const void*, const void*, size_t);
using DivideFn = void (*)(void*, size_t, int);

#define BRAID_NATIVE_REDUCE(name, T, Op) \
  BRAID_KERNEL_CLONES void name(void* o, const void* a, const void* b, size_t n) { \
    NativeLoop<T, Op>(o, a, b, n);                                                  \
  }
#define BRAID_VIA_FLOAT_REDUCE(name, Codec, Op) \
  BRAID_KERNEL_CLONES void name(void* o, const void* a, const void* b, size_t n) { \
    ViaFloatLoop<Codec, Op>(o, a, b, n);                                            \
  }
#define BRAID_NATIVE_ALL_OPS(prefix, T)        \
  BRAID_NATIVE_REDUCE(prefix##Sum, T, SumOp)   \
  BRAID_NATIVE_REDUCE(prefix##Prod, T, ProdOp) \
  BRAID_NATIVE_REDUCE(prefix##Max, T, MaxOp)   \
  BRAID_NATIVE_REDUCE(prefix##Min, T, MinOp)   \
  BRAID_KERNEL_CLONES void prefix##Divide(void* p, size_t n, int d) { NativeDivide<T>(p, n, d); }
#define BRAID_VIA_FLOAT_ALL_OPS(prefix, Codec)        \
  BRAID_VIA_FLOAT_REDUCE(prefix##Sum, Codec, SumOp)   \
  BRAID_VIA_FLOAT_REDUCE(prefix##Prod, Codec, ProdOp) \
  BRAID_VIA_FLOAT_REDUCE(prefix##Max, Codec, MaxOp)   \
  BRAID_VIA_FLOAT_REDUCE(prefix##Min, Codec, MinOp)   \
  BRAID_KERNEL_CLONES void prefix##Divide(void* p, size_t n, int d) { ViaFloatDivide<Codec>(p, n, d); }

BRAID_NATIVE_ALL_OPS(Int8, int8_t)
BRAID_NATIVE_ALL_OPS(Uint8, uint8_t)
BRAID_NATIVE_ALL_OPS(Int32, int32_t)
BRAID_NATIVE_ALL_OPS(Uint32, uint32_t)
BRAID_NATIVE_ALL_OPS(Int64, int64_t)
BRAID_NATIVE_ALL_OPS(Uint64, uint64_t)
BRAID_VIA_FLOAT_ALL_OPS(Float16, HalfCodec)
BRAID_NATIVE_ALL_OPS(Float32, float)
BRAID_NATIVE_ALL_OPS(Float64, double)
BRAID_VIA_FLOAT_ALL_OPS(Bfloat16, Bfloat16Codec)

#undef BRAID_NATIVE_REDUCE
#undef BRAID_VIA_FLOAT_REDUCE
#undef BRAID_NATIVE_ALL_OPS
#undef BRAID_VIA_FLOAT_ALL_OPS

#if BRAID_KERNEL_X86_AVX2
// ---- float16 / bfloat16 with AVX2 (+F16C) intrinsics ----------------------------------------
// Why by hand: the portable loops above vectorize, but the 16 <-> 32-bit widening and the
// rounding emulation cost ~50 instructions per 8 elements (about 2 GB/s for float16), below what
// the transports deliver. F16C converts float16 in one instruction each way; bfloat16 widens by
// a shift and narrows with the same round-to-nearest-even integer trick as FloatToBfloat16.
// Results equal the portable path's bit for bit except NaN payloads (vcvtps2ph keeps them).
#define BRAID_AVX2_F16C __attribute__((target("avx2,f16c")))

struct AvxHalf {
  static BRAID_AVX2_F16C BRAID_ALWAYS_INLINE __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static BRAID_AVX2_F16C BRAID_ALWAYS_INLINE void Store(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};

struct AvxBfloat16 {
  static BRAID_AVX2_F16C BRAID_ALWAYS_INLINE __m256 Load(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static BRAID_AVX2_F16C BRAID_ALWAYS_INLINE void Store(uint16_t* p, __m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    // |u| > Inf's bits <=> NaN; both sides are non-negative, so the signed compare is right.
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                              _mm256_set1_epi32(0x7F800000));
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_blendv_epi8(rounded, nan, is_nan);  // each in [0, 0xFFFF]
    // packus works per 128-bit lane: [b0..b3 b0..b3 | b4..b7 b4..b7]; gather qwords 0 and 2.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
};

template <typename Op>
BRAID_AVX2_F16C BRAID_ALWAYS_INLINE __m256 AvxApply(__m256 a, __m256 b) {
  if constexpr (std::is_same_v<Op, SumOp>) {
    return _mm256_add_ps(a, b);
  } else if constexpr (std::is_same_v<Op, ProdOp>) {
    return _mm256_mul_ps(a, b);
  } else {
    // Same NaN rule as MaxOp/MinOp: take a if it wins or is NaN, else b.
    constexpr int kWins = std::is_same_v<Op, MaxOp> ? _CMP_GT_OQ : _CMP_LT_OQ;
    const __m256 take_a = _mm256_or_ps(_mm256_cmp_ps(a, b, kWins), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_ps(b, a, take_a);
  }
}

// Exact aliasing (out == a or b) is safe: each block is loaded before it is stored.
template <typename Avx, typename Codec, typename Op>
BRAID_AVX2_F16C void AvxViaFloatLoop(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Avx::Store(o + i, AvxApply<Op>(Avx::Load(x + i), Avx::Load(y + i)));
  for (; i < n; ++i) o[i] = Codec::Store(Op::Apply(Codec::Load(x[i]), Codec::Load(y[i])));
}

template <typename Avx, typename Codec>
BRAID_AVX2_F16C void AvxViaFloatDivide(void* buf, size_t n, int divisor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  const float d = static_cast<float>(divisor);
  const __m256 vd = _mm256_set1_ps(d);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Avx::Store(p + i, _mm256_div_ps(Avx::Load(p + i), vd));
  for (; i < n; ++i) p[i] = Codec::Store(Codec::Load(p[i]) / d);
}

#define BRAID_AVX_ROW(Avx, Codec)                                                          \
  {AvxViaFloatLoop<Avx, Codec, SumOp>, AvxViaFloatLoop<Avx, Codec, ProdOp>,               \
   AvxViaFloatLoop<Avx, Codec, MaxOp>, AvxViaFloatLoop<Avx, Codec, MinOp>,                \
   AvxViaFloatLoop<Avx, Codec, SumOp>}
const ReduceFn kAvxFloat16Reduce[kNumReduceOps] = BRAID_AVX_ROW(AvxHalf, HalfCodec);
const ReduceFn kAvxBfloat16Reduce[kNumReduceOps] = BRAID_AVX_ROW(AvxBfloat16, Bfloat16Codec);
#undef BRAID_AVX_ROW

bool CpuHasAvx2F16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}
#endif  // BRAID_KERNEL_X86_AVX2

// Indexed by DataType, then ReduceOp; kAvg reduces as kSum.
#define BRAID_ROW(p) {p##Sum, p##Prod, p##Max, p##Min, p##Sum}
const ReduceFn kReduce[kNumDataTypes][kNumReduceOps] = {
    BRAID_ROW(Int8),    BRAID_ROW(Uint8),   BRAID_ROW(Int32),   BRAID_ROW(Uint32),
    BRAID_ROW(Int64),   BRAID_ROW(Uint64),  BRAID_ROW(Float16), BRAID_ROW(Float32),
    BRAID_ROW(Float64), BRAID_ROW(Bfloat16),
};
#undef BRAID_ROW

const DivideFn kDivide[kNumDataTypes] = {
    Int8Divide,    Uint8Divide,   Int32Divide,   Uint32Divide,   Int64Divide,
    Uint64Divide,  Float16Divide, Float32Divide, Float64Divide,  Bfloat16Divide,
};

static_assert(static_cast<int>(DataType::kInt8) == 0 && static_cast<int>(DataType::kUint8) == 1 &&
                  static_cast<int>(DataType::kInt32) == 2 && static_cast<int>(DataType::kUint32) == 3 &&
                  static_cast<int>(DataType::kInt64) == 4 && static_cast<int>(DataType::kUint64) == 5 &&
                  static_cast<int>(DataType::kFloat16) == 6 && static_cast<int>(DataType::kFloat32) == 7 &&
                  static_cast<int>(DataType::kFloat64) == 8 && static_cast<int>(DataType::kBfloat16) == 9,
              "kernel tables are indexed by DataType");
static_assert(static_cast<int>(ReduceOp::kSum) == 0 && static_cast<int>(ReduceOp::kProd) == 1 &&
                  static_cast<int>(ReduceOp::kMax) == 2 && static_cast<int>(ReduceOp::kMin) == 3 &&
                  static_cast<int>(ReduceOp::kAvg) == 4,
              "kernel tables are indexed by ReduceOp");

}  // namespace

void ReduceInto(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) {
  const int t = static_cast<int>(type);
  const int o = static_cast<int>(op);
  if (!IsValidDataType(t) || !IsValidReduceOp(o) || count == 0) return;
#if BRAID_KERNEL_X86_AVX2
  // The type first: the CPU check is a guarded static, and float32 is the common type.
  if ((type == DataType::kFloat16 || type == DataType::kBfloat16) && CpuHasAvx2F16c()) {
    if (type == DataType::kFloat16) return kAvxFloat16Reduce[o](out, a, b, count);
    return kAvxBfloat16Reduce[o](out, a, b, count);
  }
#endif
  kReduce[t][o](out, a, b, count);
}

void DivideInPlace(DataType type, void* buf, size_t count, int divisor) {
  const int t = static_cast<int>(type);
  if (!IsValidDataType(t) || divisor < 1 || count == 0) return;
  if (divisor == 1) return;
#if BRAID_KERNEL_X86_AVX2
  if (CpuHasAvx2F16c()) {
    if (type == DataType::kFloat16) return AvxViaFloatDivide<AvxHalf, HalfCodec>(buf, count, divisor);
    if (type == DataType::kBfloat16) {
      return AvxViaFloatDivide<AvxBfloat16, Bfloat16Codec>(buf, count, divisor);
    }
  }
#endif
  kDivide[t](buf, count, divisor);
}

}  // namespace braid::kernels
