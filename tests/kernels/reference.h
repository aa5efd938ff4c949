// Slow, obviously-correct reference conversions for the kernel tests, written independently of
// kernels/cpu/half.h: decode by the textbook formula, encode by rounding in double with
// std::nearbyint (ties to even in the default rounding mode).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace braid::kernels::testing {

// A binary floating format with `exp_bits` exponent and `man_bits` stored mantissa bits.
struct Format {
  int exp_bits;
  int man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
};
constexpr Format kHalf{5, 10};
constexpr Format kBfloat16{8, 7};

inline double RefDecode(Format f, uint32_t bits) {
  const uint32_t man = bits & ((1u << f.man_bits) - 1);
  const uint32_t exp = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const bool negative = (bits >> (f.man_bits + f.exp_bits)) & 1;
  double value;
  if (exp == (1u << f.exp_bits) - 1) {
    value = man == 0 ? INFINITY : NAN;
  } else if (exp == 0) {
    value = std::ldexp(static_cast<double>(man), 1 - f.bias() - f.man_bits);
  } else {
    value = std::ldexp(static_cast<double>(man + (1u << f.man_bits)),
                       static_cast<int>(exp) - f.bias() - f.man_bits);
  }
  return negative ? -value : value;
}

// Rounds `x` (a float's value) to the format, nearest even. NaN gives the canonical quiet NaN.
inline uint32_t RefEncode(Format f, double x) {
  const uint32_t sign = std::signbit(x) ? 1u << (f.exp_bits + f.man_bits) : 0u;
  const uint32_t exp_all_ones = ((1u << f.exp_bits) - 1) << f.man_bits;
  if (std::isnan(x)) return sign | exp_all_ones | (1u << (f.man_bits - 1));
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | exp_all_ones;
  const int min_exp = 1 - f.bias();
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): floor(log2(a)) = e - 1
  int ex = (a == 0) ? min_exp : (e - 1 < min_exp ? min_exp : e - 1);
  double q = std::nearbyint(a / std::ldexp(1.0, ex - f.man_bits));  // exact quotient, then RNE
  const double two_m1 = std::ldexp(1.0, f.man_bits + 1);
  if (q >= two_m1) {  // rounded up into the next binade
    ++ex;
    q /= 2;
  }
  if (ex > f.bias()) return sign | exp_all_ones;  // overflow rounds to infinity
  const uint32_t qi = static_cast<uint32_t>(q);
  if (qi < (1u << f.man_bits)) return sign | qi;  // subnormal (or zero)
  return sign | (static_cast<uint32_t>(ex + f.bias()) << f.man_bits) | (qi - (1u << f.man_bits));
}

inline bool RefIsNan(Format f, uint32_t bits) {
  const uint32_t exp = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1);
  return exp == (1u << f.exp_bits) - 1 && (bits & ((1u << f.man_bits) - 1)) != 0;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace braid::kernels::testing
