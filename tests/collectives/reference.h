// Inputs whose reductions are exact in every datatype, and the serial reference for them.
//
// Values are small integers (products are powers of two up to 2^8), so a sum, product, max or
// min over up to 8 ranks is exact even in bfloat16, and any reduction order gives the same bits;
// the reference folds over ranks in rank order, independently of braid's kernels (float16 via the
// compiler's _Float16, bfloat16 via its own rounding).
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/c/braid.h"

namespace braid::testing {

inline size_t TypeSize(braidDataType_t type) {
  switch (type) {
    case braidInt8: case braidUint8: return 1;
    case braidFloat16: case braidBfloat16: return 2;
    case braidInt32: case braidUint32: case braidFloat32: return 4;
    default: return 8;
  }
}

inline bool IsUnsigned(braidDataType_t t) {
  return t == braidUint8 || t == braidUint32 || t == braidUint64;
}
inline bool IsFloat(braidDataType_t t) {
  return t == braidFloat16 || t == braidFloat32 || t == braidFloat64 || t == braidBfloat16;
}

// Input element i of `rank` for reduction `op`, as an exact small integer.
inline int64_t InputValue(braidDataType_t type, braidRedOp_t op, int rank, size_t i) {
  const bool sign = !IsUnsigned(type);
  switch (op) {
    case braidProd: {
      int64_t v = ((rank + i) % 3 == 0) ? 2 : 1;
      return (sign && (rank * 3 + i) % 5 == 0) ? -v : v;
    }
    case braidMax:
    case braidMin: return static_cast<int64_t>((rank * 5 + i * 11) % 17) - (sign ? 8 : 0);
    default: return static_cast<int64_t>((rank * 7 + i * 3) % 9) - (sign ? 4 : 0);
  }
}

inline uint16_t FloatToBfloat16Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even (no NaNs occur here)
  return static_cast<uint16_t>(bits >> 16);
}
inline float Bfloat16BitsToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Writes `value` (exact integer, or for float averages the quotient) into element i of `buffer`.
inline void Store(braidDataType_t type, void* buffer, size_t i, double value) {
  auto* p = static_cast<char*>(buffer);
  switch (type) {
    case braidInt8: { int8_t v = static_cast<int8_t>(static_cast<int64_t>(value)); std::memcpy(p + i, &v, 1); break; }
    case braidUint8: { uint8_t v = static_cast<uint8_t>(static_cast<int64_t>(value)); std::memcpy(p + i, &v, 1); break; }
    case braidInt32: { int32_t v = static_cast<int32_t>(static_cast<int64_t>(value)); std::memcpy(p + 4 * i, &v, 4); break; }
    case braidUint32: { uint32_t v = static_cast<uint32_t>(static_cast<int64_t>(value)); std::memcpy(p + 4 * i, &v, 4); break; }
    case braidInt64: { int64_t v = static_cast<int64_t>(value); std::memcpy(p + 8 * i, &v, 8); break; }
    case braidUint64: { uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(value)); std::memcpy(p + 8 * i, &v, 8); break; }
    case braidFloat16: { _Float16 v = static_cast<_Float16>(static_cast<float>(value)); std::memcpy(p + 2 * i, &v, 2); break; }
    case braidBfloat16: { uint16_t v = FloatToBfloat16Bits(static_cast<float>(value)); std::memcpy(p + 2 * i, &v, 2); break; }
    case braidFloat32: { float v = static_cast<float>(value); std::memcpy(p + 4 * i, &v, 4); break; }
    default: { double v = value; std::memcpy(p + 8 * i, &v, 8); break; }
  }
}

// Element i of `buffer` as a double (exact for every value these tests produce).
inline double Load(braidDataType_t type, const void* buffer, size_t i) {
  const auto* p = static_cast<const char*>(buffer);
  switch (type) {
    case braidInt8: { int8_t v; std::memcpy(&v, p + i, 1); return v; }
    case braidUint8: { uint8_t v; std::memcpy(&v, p + i, 1); return v; }
    case braidInt32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case braidUint32: { uint32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case braidInt64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case braidUint64: { uint64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case braidFloat16: { _Float16 v; std::memcpy(&v, p + 2 * i, 2); return static_cast<float>(v); }
    case braidBfloat16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return Bfloat16BitsToFloat(v); }
    case braidFloat32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    default: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
  }
}

// The reduction of element i over `size` ranks, folded serially in rank order, as the value the
// result buffer must hold (already converted to `type` and back).
inline double ExpectedValue(braidDataType_t type, braidRedOp_t op, int size, size_t i) {
  int64_t acc = InputValue(type, op, 0, i);
  for (int r = 1; r < size; ++r) {
    int64_t v = InputValue(type, op, r, i);
    switch (op) {
      case braidProd: acc *= v; break;
      case braidMax: acc = v > acc ? v : acc; break;
      case braidMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  double exact = static_cast<double>(acc);
  if (op == braidAvg) {
    if (!IsFloat(type)) {
      exact = static_cast<double>(acc / size);  // C++ division truncates toward zero
    } else if (type == braidFloat64) {
      exact = static_cast<double>(acc) / size;
    } else {
      exact = static_cast<float>(acc) / static_cast<float>(size);  // divided in float precision
    }
  }
  // Round-trip through the type, so wrap-around (int8 products) and rounding match storage.
  char slot[8];
  Store(type, slot, 0, exact);
  return Load(type, slot, 0);
}

// Every input pattern above repeats with a period dividing 765 (= lcm of 3, 5, 9 and 17), so
// inputs and expected values are computed for one period and replicated.
constexpr size_t kInputPeriod = 765;

// Fills `count` elements by repeating the first period.
inline void Replicate(std::vector<char>& buffer, size_t elem, size_t count) {
  const size_t period_bytes = kInputPeriod * elem;
  for (size_t done = period_bytes; done < count * elem; done += period_bytes) {
    std::memcpy(buffer.data() + done, buffer.data(), std::min(period_bytes, count * elem - done));
  }
}

// count elements of rank's input, plus one guard byte.
inline std::vector<char> MakeInput(braidDataType_t type, braidRedOp_t op, int rank, size_t count) {
  const size_t elem = TypeSize(type);
  std::vector<char> buffer(std::max(count, kInputPeriod) * elem + 1);
  for (size_t i = 0; i < kInputPeriod; ++i) {
    Store(type, buffer.data(), i, static_cast<double>(InputValue(type, op, rank, i)));
  }
  Replicate(buffer, elem, count);
  buffer.resize(count * elem + 1);
  buffer.back() = 0;
  return buffer;
}

// "" if element i of `result` equals ExpectedValue for every i < count, else the first mismatch.
// Compares bytes first (the exact inputs never produce -0), then values to name the mismatch.
inline std::string CheckReduced(braidDataType_t type, braidRedOp_t op, int size, const void* result,
                                size_t count) {
  const size_t elem = TypeSize(type);
  std::vector<char> expected(std::max(count, kInputPeriod) * elem);
  for (size_t i = 0; i < kInputPeriod; ++i) Store(type, expected.data(), i, ExpectedValue(type, op, size, i));
  Replicate(expected, elem, count);
  if (count == 0 || std::memcmp(expected.data(), result, count * elem) == 0) return "";
  for (size_t i = 0; i < count; ++i) {
    double want = Load(type, expected.data(), i);
    double got = Load(type, result, i);
    if (!(got == want)) {
      return "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
             std::to_string(want);
    }
  }
  return "";
}

inline const char* TypeName(braidDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16"};
  return names[t];
}
inline const char* OpName(braidRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return names[op];
}

// --- ring family helpers ---

// Where `result` first differs from `expected` over `count` elements of `type` ("" if nowhere).
inline std::string FirstDifference(braidDataType_t type, const void* expected, const void* result,
                                   size_t count) {
  const size_t elem = TypeSize(type);
  if (count == 0 || std::memcmp(expected, result, count * elem) == 0) return "";
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(static_cast<const char*>(expected) + i * elem,
                    static_cast<const char*>(result) + i * elem, elem) != 0) {
      return "element " + std::to_string(i) + " is " + std::to_string(Load(type, result, i)) +
             ", expected " + std::to_string(Load(type, expected, i));
    }
  }
  return "";
}

// Like CheckReduced, for elements [first, first + count) of the reduction: `result` holds
// `count` elements, result[i] standing for element first + i (a reduce-scatter block).
inline std::string CheckReducedRange(braidDataType_t type, braidRedOp_t op, int size,
                                     const void* result, size_t first, size_t count) {
  const size_t elem = TypeSize(type);
  std::vector<char> period(kInputPeriod * elem);
  for (size_t i = 0; i < kInputPeriod; ++i) Store(type, period.data(), i, ExpectedValue(type, op, size, i));
  std::vector<char> expected(count * elem);
  for (size_t done = 0; done < count;) {
    const size_t phase = (first + done) % kInputPeriod;
    const size_t run = std::min(kInputPeriod - phase, count - done);
    std::memcpy(expected.data() + done * elem, period.data() + phase * elem, run * elem);
    done += run;
  }
  return FirstDifference(type, expected.data(), result, count);
}

}  // namespace braid::testing
