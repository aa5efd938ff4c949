// float16 (IEEE binary16) and bfloat16 <-> float conversions, round-to-nearest-even.
//
// Why inline and branch-free: the float16/bfloat16 reduction loops convert every element twice
// on the way in and once on the way out; written as straight-line integer and float arithmetic
// with selects, GCC vectorizes the whole loop body. The float16 pair follows the technique of
// Marat Dukhan's FP16 library: let the FPU do the rounding by scaling with powers of two, so
// subnormals and ties need no special-case code. Both need IEEE float arithmetic in the default
// rounding mode without flush-to-zero (never build these with -ffast-math).
//
// NaN: every NaN converts to a NaN of the same sign; FloatToHalf returns the canonical quiet NaN
// 0x7E00 (payload dropped), FloatToBfloat16 keeps the top payload bits and sets the quiet bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace braid::kernels {

namespace internal {
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
// cond ? a : b through masks: GCC keeps ternaries of this shape as branches in the float16
// loops and then refuses to vectorize them ("control flow in loop").
inline uint32_t Select(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}
}  // namespace internal

inline float HalfToFloat(uint16_t h) {
  using internal::BitsToFloat;
  using internal::FloatToBits;
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;  // exponent and mantissa, sign shifted out
  // Normal, Inf and NaN: move exponent+mantissa into float position, then rebias the exponent
  // by multiplying with 2^-112 (exponent field 31 lands on 255 + ..., so Inf/NaN survive).
  const float normalized = BitsToFloat((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormal (and zero): mantissa m as 0.5 + m * 2^-24 in [0.5, 1), minus 0.5.
  const float denormalized = BitsToFloat((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t magnitude =
      internal::Select(two_w < (1u << 27), FloatToBits(denormalized), FloatToBits(normalized));
  return BitsToFloat(sign | magnitude);
}

inline uint16_t FloatToHalf(float f) {
  using internal::BitsToFloat;
  using internal::FloatToBits;
  // Scaling up then down makes values beyond float16's range become Inf and leaves the rest
  // exact; the add below rounds the mantissa to 10 bits (or fewer for subnormals), to nearest
  // even, by aligning it against a power of two chosen from f's exponent.
  float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = FloatToBits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = internal::Select(bias < 0x71000000u, 0x71000000u, bias);
  base = BitsToFloat((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = FloatToBits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | internal::Select(shl1_w > 0xFF000000u, 0x7E00u, nonsign));
}

inline float Bfloat16ToFloat(uint16_t b) {
  return internal::BitsToFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBfloat16(float f) {
  const uint32_t u = internal::FloatToBits(f);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
  // mantissa correctly bumps the exponent (up to Inf for values beyond bfloat16's range).
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const bool is_nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(internal::Select(is_nan, (u >> 16) | 0x0040u, rounded));
}

}  // namespace braid::kernels
