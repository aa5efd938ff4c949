#include "bench/perf_types.h"

#include <cmath>
#include <cstring>

namespace braid::bench {
namespace {

// nccl-tests' spelling, indexed by braidDataType_t / braidRedOp_t.
constexpr const char* kTypeNames[braidNumTypes] = {"int8",   "uint8", "int32",  "uint32",
                                                   "int64",  "uint64", "half",  "float",
                                                   "double", "bfloat16"};
constexpr size_t kTypeSizes[braidNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
constexpr const char* kOpNames[braidNumOps] = {"sum", "prod", "max", "min", "avg"};

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace

size_t TypeSize(braidDataType_t type) {
  return (type >= 0 && type < braidNumTypes) ? kTypeSizes[type] : 0;
}
const char* TypeName(braidDataType_t type) {
  return (type >= 0 && type < braidNumTypes) ? kTypeNames[type] : "invalid";
}
const char* OpName(braidRedOp_t op) {
  return (op >= 0 && op < braidNumOps) ? kOpNames[op] : "invalid";
}
bool IsFloatingType(braidDataType_t type) {
  return type == braidFloat16 || type == braidFloat32 || type == braidFloat64 ||
         type == braidBfloat16;
}

// Plain branchy conversions, written for clarity, not speed.
uint16_t BenchFloatToHalf(float f) {
  const uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (the midpoint to 2^16): Inf
  if (a < 0x38800000u) {                        // below 2^-14: a multiple of 2^-24, rounded
    const double units = std::nearbyint(static_cast<double>(BitsToFloat(a)) * 16777216.0);
    return sign | static_cast<uint16_t>(units);  // 1024 units is the smallest normal: right too
  }
  const uint32_t exponent = (a >> 23) - 127 + 15;
  const uint32_t mantissa = a & 0x7FFFFFu;
  uint32_t h = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // nearest, ties to even
  return sign | static_cast<uint16_t>(h);
}

float BenchHalfToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  float v;
  if (exponent == 0x1F) {
    v = mantissa ? NAN : INFINITY;
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -24);
  } else {
    v = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  return (h & 0x8000) ? -v : v;
}

uint16_t BenchFloatToBfloat16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t b = x >> 16;
  const uint32_t rest = x & 0xFFFFu;
  if (rest > 0x8000u || (rest == 0x8000u && (b & 1u))) ++b;
  return static_cast<uint16_t>(b);
}

float BenchBfloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

}  // namespace braid::bench
