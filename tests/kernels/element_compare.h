// Inputs and comparisons shared by the kernel tests that check one implementation against
// another (CUDA functors on the CPU, CUDA kernels on the GPU, the device seam): inputs that reach
// each datatype's corners, and an element-by-element comparison where two NaNs are equal (NaN
// payloads legitimately differ between implementations) and everything else must match bit for
// bit (so +0 and -0 differ).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "tests/kernels/reference.h"

namespace braid::kernels::testing {

inline bool IsFloating(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64 ||
         t == DataType::kBfloat16;
}

// Whether the element at p is a NaN, decoded from its bits (no use of the code under test).
inline bool IsNanAt(DataType t, const uint8_t* p) {
  switch (t) {
    case DataType::kFloat16: { uint16_t h; std::memcpy(&h, p, 2); return RefIsNan(kHalf, h); }
    case DataType::kBfloat16: { uint16_t h; std::memcpy(&h, p, 2); return RefIsNan(kBfloat16, h); }
    case DataType::kFloat32: { float f; std::memcpy(&f, p, 4); return std::isnan(f); }
    case DataType::kFloat64: { double d; std::memcpy(&d, p, 8); return std::isnan(d); }
    default: return false;
  }
}

// The first element where `actual` differs from `expected` ("element i of n: expected bits 0x..,
// got 0x.."), or "" if none does.
inline std::string FirstMismatch(DataType t, const uint8_t* expected, const uint8_t* actual, size_t count) {
  const size_t size = DataTypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* e = expected + i * size;
    const uint8_t* a = actual + i * size;
    if (IsFloating(t) && IsNanAt(t, e) && IsNanAt(t, a)) continue;
    if (std::memcmp(e, a, size) != 0) {
      uint64_t eb = 0, ab = 0;
      std::memcpy(&eb, e, size);
      std::memcpy(&ab, a, size);
      char text[128];
      std::snprintf(text, sizeof(text), "element %zu of %zu: expected bits 0x%llx, got 0x%llx", i, count,
                    static_cast<unsigned long long>(eb), static_cast<unsigned long long>(ab));
      return text;
    }
  }
  return "";
}

// `count` elements of type t: random bits (every float16/bfloat16 class, integer wraparound),
// specials (NaN, +-0, +-Inf, subnormals, extremes) and, for float and double, ordinary values
// (random bits there are mostly huge or tiny).
inline std::vector<uint8_t> MakeInput(DataType t, size_t count, std::mt19937_64& rng) {
  const size_t size = DataTypeSize(t);
  std::vector<uint8_t> bytes(count * size);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    const int pick = static_cast<int>(rng() % 8);
    if (t == DataType::kFloat32 && pick < 6) {
      const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                                std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::max(),
                                1.0f, -1.5f};
      float f = pick < 2 ? specials[rng() % 10]
                         : std::ldexp(static_cast<float>(static_cast<int32_t>(rng() % 20001) - 10000), -7);
      std::memcpy(&bits, &f, 4);
    } else if (t == DataType::kFloat64 && pick < 6) {
      const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN,
                                 std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max(),
                                 1.0, -2.5};
      double d = pick < 2 ? specials[rng() % 10]
                          : std::ldexp(static_cast<double>(static_cast<int64_t>(rng() % 20001) - 10000), -9);
      std::memcpy(&bits, &d, 8);
    } else if ((t == DataType::kFloat16 || t == DataType::kBfloat16) && pick < 2) {
      const uint16_t half_specials[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x0001, 0x8001, 0x7BFF, 0x3C00, 0x3C01};
      const uint16_t bf16_specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8001, 0x7F7F, 0x3F80, 0x3F81};
      bits = t == DataType::kFloat16 ? half_specials[rng() % 10] : bf16_specials[rng() % 10];
    } else if (!IsFloating(t) && pick < 2) {
      const uint64_t int_specials[] = {0, 1, ~uint64_t{0}, uint64_t{1} << (size * 8 - 1),
                                       (uint64_t{1} << (size * 8 - 1)) - 1};
      bits = int_specials[rng() % 5];
    }
    std::memcpy(&bytes[i * size], &bits, size);  // little-endian: the low bytes
  }
  return bytes;
}

}  // namespace braid::kernels::testing
