// float16 / bfloat16 conversions against hand-computed bit patterns, exhaustive decoding and an
// independent rounding reference (tests/kernels/reference.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "kernels/cpu/half.h"
#include "tests/kernels/reference.h"

namespace braid::kernels {
namespace {

using testing::BitsToFloat;
using testing::FloatBits;
using testing::kBfloat16;
using testing::kHalf;
using testing::RefDecode;
using testing::RefEncode;
using testing::RefIsNan;

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

TEST_CASE("FloatToHalf: hand-computed bit patterns", "[kernels][half]") {
  CHECK(FloatToHalf(0.0f) == 0x0000);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  CHECK(FloatToHalf(1.0f) == 0x3C00);
  CHECK(FloatToHalf(-2.0f) == 0xC000);
  CHECK(FloatToHalf(0.5f) == 0x3800);
  CHECK(FloatToHalf(0.1f) == 0x2E66);
  CHECK(FloatToHalf(1.0f / 3.0f) == 0x3555);
  CHECK(FloatToHalf(65504.0f) == 0x7BFF);       // largest finite
  CHECK(FloatToHalf(65519.0f) == 0x7BFF);       // below the midpoint to 65536
  CHECK(FloatToHalf(65520.0f) == 0x7C00);       // the midpoint: ties to even = Inf
  CHECK(FloatToHalf(1e6f) == 0x7C00);
  CHECK(FloatToHalf(-1e6f) == 0xFC00);
  CHECK(FloatToHalf(kInf) == 0x7C00);
  CHECK(FloatToHalf(-kInf) == 0xFC00);
  CHECK(FloatToHalf(std::ldexp(1.0f, -14)) == 0x0400);             // smallest normal
  CHECK(FloatToHalf(1023 * std::ldexp(1.0f, -24)) == 0x03FF);      // largest subnormal
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);             // smallest subnormal
  CHECK(FloatToHalf(-std::ldexp(1.0f, -24)) == 0x8001);
  CHECK(FloatToHalf(std::ldexp(1.0f, -25)) == 0x0000);             // tie 0 | 1 -> 0 (even)
  CHECK(FloatToHalf(std::ldexp(1.0f, -25) * 1.0000001f) == 0x0001);  // just above the tie
  CHECK(FloatToHalf(3 * std::ldexp(1.0f, -25)) == 0x0002);         // tie 1 | 2 -> 2
  CHECK(FloatToHalf(5 * std::ldexp(1.0f, -25)) == 0x0002);         // tie 2 | 3 -> 2
  CHECK(FloatToHalf(std::ldexp(1.0f, -30)) == 0x0000);             // underflow to +0
  CHECK(FloatToHalf(-std::ldexp(1.0f, -30)) == 0x8000);            // ... and -0
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie 0x3C00 | 0x3C01 -> even
  CHECK(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie 0x3C01 | 0x3C02 -> even
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);
  CHECK(FloatToHalf(2047.0f) == 0x67FF);
  CHECK(FloatToHalf(2049.0f) == 0x6800);  // tie 2048 | 2050 -> 2048 (even)
  CHECK(FloatToHalf(2051.0f) == 0x6802);  // tie 2050 | 2052 -> 2052 (even)
  CHECK(FloatToHalf(BitsToFloat(1)) == 0x0000);  // float subnormal
  const uint16_t nan = FloatToHalf(kNan);
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x03FF) != 0);
  CHECK(FloatToHalf(-kNan) == (0x8000 | nan));
  CHECK(RefIsNan(kHalf, FloatToHalf(BitsToFloat(0x7F800001u))));  // signalling NaN
}

TEST_CASE("HalfToFloat: hand-computed values", "[kernels][half]") {
  CHECK(FloatBits(HalfToFloat(0x0000)) == 0x00000000u);
  CHECK(FloatBits(HalfToFloat(0x8000)) == 0x80000000u);  // -0 keeps its sign
  CHECK(HalfToFloat(0x3C00) == 1.0f);
  CHECK(HalfToFloat(0xC000) == -2.0f);
  CHECK(HalfToFloat(0x7BFF) == 65504.0f);
  CHECK(HalfToFloat(0x0400) == std::ldexp(1.0f, -14));
  CHECK(HalfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(HalfToFloat(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(HalfToFloat(0x03FF) == 1023 * std::ldexp(1.0f, -24));
  CHECK(HalfToFloat(0x3555) == 0.333251953125f);
  CHECK(HalfToFloat(0x7C00) == kInf);
  CHECK(HalfToFloat(0xFC00) == -kInf);
  CHECK(std::isnan(HalfToFloat(0x7E00)));
  CHECK(std::isnan(HalfToFloat(0x7C01)));  // signalling NaN
  CHECK(std::signbit(HalfToFloat(0xFE00)));
}

TEST_CASE("HalfToFloat: all 65536 values match the textbook decoding", "[kernels][half]") {
  int mismatches = 0;
  uint32_t first = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    const double want = RefDecode(kHalf, h);
    const bool ok = std::isnan(want) ? (std::isnan(got) && std::signbit(got) == std::signbit(want))
                                     : FloatBits(got) == FloatBits(static_cast<float>(want));
    if (!ok && mismatches++ == 0) first = h;
  }
  INFO("first mismatch at half 0x" << std::hex << first);
  CHECK(mismatches == 0);
}

TEST_CASE("FloatToHalf: round trip, ties and random floats", "[kernels][half]") {
  int mismatches = 0;
  uint32_t first = 0;
  auto check = [&](float f) {
    const uint16_t got = FloatToHalf(f);
    const uint32_t want = RefEncode(kHalf, f);
    const bool ok = std::isnan(f) ? RefIsNan(kHalf, got) && (got >> 15) == (want >> 15) : got == want;
    if (!ok && mismatches++ == 0) first = FloatBits(f);
  };
  for (uint32_t h = 0; h < 65536; ++h) {
    if (RefIsNan(kHalf, h)) continue;
    const float f = static_cast<float>(RefDecode(kHalf, h));
    REQUIRE(FloatToHalf(f) == h);  // every half survives the round trip
    if ((h & 0x7FFF) < 0x7C00) {
      // The midpoint to the next half away from zero (exact in float), and its neighbours.
      const float next = static_cast<float>(RefDecode(kHalf, h + 1));
      const float mid = (f + next) / 2;
      check(mid);
      check(std::nextafter(mid, 0.0f));
      check(std::nextafter(mid, f > 0 || (f == 0 && !std::signbit(f)) ? kInf : -kInf));
    }
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 2000000; ++i) check(BitsToFloat(rng()));  // every exponent, NaN, Inf
  std::uniform_real_distribution<float> in_range(-70000.0f, 70000.0f);
  for (int i = 0; i < 1000000; ++i) check(in_range(rng));
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);  // subnormal territory
  for (int i = 0; i < 1000000; ++i) check(tiny(rng));
  INFO("first mismatch at float bits 0x" << std::hex << first);
  CHECK(mismatches == 0);
}

#ifdef __FLT16_MANT_DIG__
TEST_CASE("float16 conversions agree with the compiler's _Float16", "[kernels][half]") {
  std::mt19937 rng(7);
  int mismatches = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float f = BitsToFloat(rng());
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, sizeof(bits));
    if (FloatToHalf(f) != bits) ++mismatches;
    if (FloatBits(HalfToFloat(bits)) != FloatBits(static_cast<float>(h))) ++mismatches;
  }
  CHECK(mismatches == 0);
}
#endif

TEST_CASE("FloatToBfloat16: hand-computed bit patterns", "[kernels][bfloat16]") {
  CHECK(FloatToBfloat16(0.0f) == 0x0000);
  CHECK(FloatToBfloat16(-0.0f) == 0x8000);
  CHECK(FloatToBfloat16(1.0f) == 0x3F80);
  CHECK(FloatToBfloat16(-2.0f) == 0xC000);
  CHECK(FloatToBfloat16(3.140625f) == 0x4049);
  CHECK(FloatToBfloat16(BitsToFloat(0x40490FDBu)) == 0x4049);             // pi rounds down
  CHECK(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);          // tie -> even
  CHECK(FloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);      // tie -> even
  CHECK(FloatToBfloat16(BitsToFloat(0x3F808001u)) == 0x3F81);             // just above a tie
  CHECK(FloatToBfloat16(BitsToFloat(0x7F7F7FFFu)) == 0x7F7F);             // largest finite
  CHECK(FloatToBfloat16(std::numeric_limits<float>::max()) == 0x7F80);    // rounds to Inf
  CHECK(FloatToBfloat16(kInf) == 0x7F80);
  CHECK(FloatToBfloat16(-kInf) == 0xFF80);
  CHECK(FloatToBfloat16(BitsToFloat(0x00000001u)) == 0x0000);  // smallest float subnormal
  CHECK(FloatToBfloat16(BitsToFloat(0x00008000u)) == 0x0000);  // tie 0 | 1 -> 0
  CHECK(FloatToBfloat16(BitsToFloat(0x00018000u)) == 0x0002);  // tie 1 | 2 -> 2
  CHECK(FloatToBfloat16(BitsToFloat(0x00010000u)) == 0x0001);  // smallest bfloat16 subnormal
  CHECK(FloatToBfloat16(kNan) == 0x7FC0);
  CHECK(FloatToBfloat16(-kNan) == 0xFFC0);
  CHECK(RefIsNan(kBfloat16, FloatToBfloat16(BitsToFloat(0x7F800001u))));  // payload below bit 16
  CHECK(RefIsNan(kBfloat16, FloatToBfloat16(BitsToFloat(0x7FFFFFFFu))));  // must not carry to 0
}

TEST_CASE("Bfloat16ToFloat: all 65536 values match the textbook decoding", "[kernels][bfloat16]") {
  CHECK(Bfloat16ToFloat(0x3F80) == 1.0f);
  CHECK(FloatBits(Bfloat16ToFloat(0x8000)) == 0x80000000u);
  CHECK(Bfloat16ToFloat(0x0001) == std::ldexp(1.0f, -133));
  int mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = Bfloat16ToFloat(static_cast<uint16_t>(b));
    const double want = RefDecode(kBfloat16, b);
    const bool ok = std::isnan(want) ? std::isnan(got)
                                     : FloatBits(got) == FloatBits(static_cast<float>(want));
    if (!ok) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("FloatToBfloat16: round trip, ties and random floats", "[kernels][bfloat16]") {
  int mismatches = 0;
  uint32_t first = 0;
  auto check = [&](float f) {
    const uint16_t got = FloatToBfloat16(f);
    const uint32_t want = RefEncode(kBfloat16, f);
    const bool ok =
        std::isnan(f) ? RefIsNan(kBfloat16, got) && (got >> 15) == (want >> 15) : got == want;
    if (!ok && mismatches++ == 0) first = FloatBits(f);
  };
  for (uint32_t b = 0; b < 65536; ++b) {
    if (RefIsNan(kBfloat16, b)) continue;
    REQUIRE(FloatToBfloat16(static_cast<float>(RefDecode(kBfloat16, b))) == b);
    if ((b & 0x7FFF) < 0x7F80) {
      const uint32_t mid = (b << 16) | 0x8000u;  // the exact midpoint to the next value
      check(BitsToFloat(mid));
      check(BitsToFloat(mid - 1));
      check(BitsToFloat(mid + 1));
    }
  }
  std::mt19937 rng(54321);
  for (int i = 0; i < 4000000; ++i) check(BitsToFloat(rng()));
  INFO("first mismatch at float bits 0x" << std::hex << first);
  CHECK(mismatches == 0);
}

}  // namespace
}  // namespace braid::kernels
