#include "bench/perf_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "bench/perf_types.h"

namespace braid::bench {

// Every input is a small integer, exact in every dtype, and chosen per op so that the result
// over any number of ranks (up to ~60 for float16 products, 128 for bfloat16 sums) is exact too,
// whatever order an algorithm combines the ranks in:
//   sum/avg  in [-2, 2]  (|partial sums| <= 2 * nranks)
//   prod     in {±1, ±2} with 2 on about one rank in five (|partial products| <= the final one)
//   max/min  in [-5, 5]
// Which value an element gets comes from a hash of (element, seed), so the data has no period:
// a block reduced or delivered at the wrong offset mismatches. Unsigned types store the same
// values modulo 2^bits, and the expected results follow braid's unsigned semantics (wrapping
// sums and products, unsigned max/min).
//
// Speed matters here: at 16 MiB x 4 ranks on two cores, filling and checking must not cost more
// than the collective. So each fill is one typed loop, small values convert through a table,
// and CountWrong compares whole buffers before it looks at elements.

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element i's key for a given seed (and stream, for rank and block data): 40 random bits.
uint64_t ElementKey(uint64_t salt, size_t i) { return Mix(salt ^ static_cast<uint64_t>(i)) >> 24; }
uint64_t Salt(uint64_t stream, uint64_t seed) { return Mix(stream * 0x100000001B3ull ^ Mix(seed)); }

// A reduction input depends on the element only through its class, k mod 5 (sum, avg),
// k mod 11 (max, min) or (k mod 5, (k >> 8) mod 7) (prod): results are computed once per class
// and copied per element.
int NumClasses(braidRedOp_t op) {
  return op == braidProd ? 35 : (op == braidMax || op == braidMin) ? 11 : 5;
}
size_t ClassOf(braidRedOp_t op, uint64_t k) {
  switch (op) {
    case braidProd: return static_cast<size_t>((k % 5) * 7 + (k >> 8) % 7);
    case braidMax:
    case braidMin: return static_cast<size_t>(k % 11);
    default: return static_cast<size_t>(k % 5);
  }
}
int64_t ReduceInputForClass(braidRedOp_t op, int rank, size_t cls) {
  const uint64_t r = static_cast<uint64_t>(rank);
  switch (op) {
    case braidProd: {
      const int64_t magnitude = ((cls / 7 + r) % 5 == 0) ? 2 : 1;
      return (((cls % 7) * 3 + r) % 7 == 0) ? -magnitude : magnitude;
    }
    case braidMax:
    case braidMin: return static_cast<int64_t>((cls * 7 + r * 13) % 11) - 5;
    default: return static_cast<int64_t>((cls * 7 + r * 13) % 5) - 2;
  }
}

constexpr uint64_t kReduceStream = 0xB4A1D;

// Converts small integers (and any double) to element bytes; |v| < kTable goes through a table.
class Storer {
 public:
  explicit Storer(braidDataType_t type) : type_(type) {
    if (type == braidFloat16 || type == braidBfloat16) {
      for (int v = -kTable; v < kTable; ++v) {
        table_[v + kTable] = type == braidFloat16 ? BenchFloatToHalf(static_cast<float>(v))
                                                  : BenchFloatToBfloat16(static_cast<float>(v));
      }
    }
  }
  // Stores count values value(i) into buf, in one loop per type.
  template <typename F>
  void Fill(void* buf, size_t count, F value) const {
    switch (type_) {
      case braidInt8: case braidUint8: return Ints<uint8_t>(buf, count, value);
      case braidInt32: case braidUint32: return Ints<uint32_t>(buf, count, value);
      case braidInt64: case braidUint64: return Ints<uint64_t>(buf, count, value);
      case braidFloat32: {
        float* p = static_cast<float*>(buf);
        for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(value(i));
        return;
      }
      case braidFloat64: {
        double* p = static_cast<double*>(buf);
        for (size_t i = 0; i < count; ++i) p[i] = static_cast<double>(value(i));
        return;
      }
      case braidFloat16: case braidBfloat16: {
        uint16_t* p = static_cast<uint16_t*>(buf);
        for (size_t i = 0; i < count; ++i) p[i] = Half(static_cast<double>(value(i)));
        return;
      }
      default: return;
    }
  }

 private:
  static constexpr int kTable = 4096;
  template <typename U, typename F>
  static void Ints(void* buf, size_t count, F value) {
    U* p = static_cast<U*>(buf);  // two's complement: the low bits, modulo 2^bits
    for (size_t i = 0; i < count; ++i) {
      p[i] = static_cast<U>(static_cast<uint64_t>(static_cast<int64_t>(value(i))));
    }
  }
  uint16_t Half(double v) const {
    if (v > -kTable && v < kTable && v == std::floor(v)) {
      return table_[static_cast<int>(v) + kTable];
    }
    const float f = static_cast<float>(v);
    return type_ == braidFloat16 ? BenchFloatToHalf(f) : BenchFloatToBfloat16(f);
  }
  braidDataType_t type_;
  uint16_t table_[2 * kTable] = {};
};

double LoadFloating(braidDataType_t type, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf) + i * TypeSize(type);
  switch (type) {
    case braidFloat16: { uint16_t h; std::memcpy(&h, p, 2); return BenchHalfToFloat(h); }
    case braidBfloat16: { uint16_t b; std::memcpy(&b, p, 2); return BenchBfloat16ToFloat(b); }
    case braidFloat32: { float f; std::memcpy(&f, p, 4); return f; }
    case braidFloat64: { double d; std::memcpy(&d, p, 8); return d; }
    default: return 0;
  }
}

// Expected result of each class (buf: NumClasses(op) elements).
template <typename T>
void ExpectedIntegerClasses(braidRedOp_t op, int nranks, void* buf) {
  using U = std::make_unsigned_t<T>;
  T* out = static_cast<T*>(buf);
  for (int c = 0; c < NumClasses(op); ++c) {
    const size_t cls = static_cast<size_t>(c);
    U acc = static_cast<U>(ReduceInputForClass(op, 0, cls));
    for (int r = 1; r < nranks; ++r) {
      const U v = static_cast<U>(ReduceInputForClass(op, r, cls));
      switch (op) {
        case braidSum: case braidAvg: acc = static_cast<U>(acc + v); break;
        case braidProd: acc = static_cast<U>(acc * v); break;
        case braidMax: acc = static_cast<T>(v) > static_cast<T>(acc) ? v : acc; break;
        case braidMin: acc = static_cast<T>(v) < static_cast<T>(acc) ? v : acc; break;
        default: break;
      }
    }
    T result = static_cast<T>(acc);
    if (op == braidAvg) {
      using C = std::common_type_t<T, int>;  // C++ division truncates toward zero
      result = static_cast<T>(static_cast<C>(result) / static_cast<C>(nranks));
    }
    out[cls] = result;
  }
}

// Element j of buf = class ClassOf(op, key(first + j)) of table.
template <typename E>
void CopyClasses(braidRedOp_t op, uint64_t salt, const char* table, void* buf, size_t count,
                 size_t first) {
  const E* t = reinterpret_cast<const E*>(table);
  E* out = static_cast<E*>(buf);
  for (size_t j = 0; j < count; ++j) out[j] = t[ClassOf(op, ElementKey(salt, first + j))];
}

void FillFromClasses(braidDataType_t type, braidRedOp_t op, uint64_t seed, const char* table,
                     void* buf, size_t count, size_t first) {
  const uint64_t salt = Salt(kReduceStream, seed);
  switch (TypeSize(type)) {
    case 1: return CopyClasses<uint8_t>(op, salt, table, buf, count, first);
    case 2: return CopyClasses<uint16_t>(op, salt, table, buf, count, first);
    case 4: return CopyClasses<uint32_t>(op, salt, table, buf, count, first);
    case 8: return CopyClasses<uint64_t>(op, salt, table, buf, count, first);
    default: return;
  }
}

}  // namespace

void FillReduceInput(braidDataType_t type, braidRedOp_t op, int rank, uint64_t seed, void* buf,
                     size_t count) {
  char table[35 * 8];
  Storer(type).Fill(table, static_cast<size_t>(NumClasses(op)),
                    [&](size_t cls) { return ReduceInputForClass(op, rank, cls); });
  FillFromClasses(type, op, seed, table, buf, count, 0);
}

void FillReduceExpected(braidDataType_t type, braidRedOp_t op, int nranks, uint64_t seed,
                        void* buf, size_t count, size_t first) {
  char table[35 * 8];
  switch (type) {
    case braidInt8: ExpectedIntegerClasses<int8_t>(op, nranks, table); break;
    case braidUint8: ExpectedIntegerClasses<uint8_t>(op, nranks, table); break;
    case braidInt32: ExpectedIntegerClasses<int32_t>(op, nranks, table); break;
    case braidUint32: ExpectedIntegerClasses<uint32_t>(op, nranks, table); break;
    case braidInt64: ExpectedIntegerClasses<int64_t>(op, nranks, table); break;
    case braidUint64: ExpectedIntegerClasses<uint64_t>(op, nranks, table); break;
    default:
      // Floating types: the exact result in double (all values are small integers), rounded
      // once.
      Storer(type).Fill(table, static_cast<size_t>(NumClasses(op)), [&](size_t cls) {
        double acc = static_cast<double>(ReduceInputForClass(op, 0, cls));
        for (int r = 1; r < nranks; ++r) {
          const double v = static_cast<double>(ReduceInputForClass(op, r, cls));
          switch (op) {
            case braidSum: case braidAvg: acc += v; break;
            case braidProd: acc *= v; break;
            case braidMax: acc = std::max(acc, v); break;
            case braidMin: acc = std::min(acc, v); break;
            default: break;
          }
        }
        if (op == braidAvg) {
          // Divide in the type's own precision (float16/bfloat16 divide in float, then round).
          acc = (type == braidFloat64) ? acc / nranks
                                       : static_cast<double>(static_cast<float>(acc) /
                                                             static_cast<float>(nranks));
        }
        return acc;
      });
  }
  FillFromClasses(type, op, seed, table, buf, count, first);
}

// A small integer in [0, 97) per element, from a hash of (stream, i, seed): no period, so a
// block in the wrong place or shifted by any offset mismatches (all but about 1 element in 97).
void FillRankData(braidDataType_t type, int rank, uint64_t seed, void* buf, size_t count) {
  const uint64_t salt = Salt(static_cast<uint32_t>(rank), seed);
  Storer(type).Fill(buf, count,
                    [&](size_t i) { return static_cast<int64_t>(ElementKey(salt, i) % 97); });
}

void FillBlockData(braidDataType_t type, int src, int dst, uint64_t seed, void* buf,
                   size_t count) {
  // Streams 2^32 and up: distinct from FillRankData's.
  const uint64_t stream = (uint64_t{1} << 32) |
                          (static_cast<uint64_t>(static_cast<uint16_t>(src)) << 16) |
                          static_cast<uint16_t>(dst);
  const uint64_t salt = Salt(stream, seed);
  Storer(type).Fill(buf, count,
                    [&](size_t i) { return static_cast<int64_t>(ElementKey(salt, i) % 97); });
}

namespace {

int64_t CountWrongElements(braidDataType_t type, braidRedOp_t op, const void* got,
                           const void* expected, size_t count) {
  const size_t size = TypeSize(type);
  int64_t wrong = 0;
  if (!IsFloatingType(type)) {
    const char* g = static_cast<const char*>(got);
    const char* e = static_cast<const char*>(expected);
    for (size_t i = 0; i < count; ++i) wrong += std::memcmp(g + i * size, e + i * size, size) != 0;
    return wrong;
  }
  const int mantissa_bits = type == braidFloat16 ? 10 : type == braidBfloat16 ? 7
                          : type == braidFloat32 ? 23 : 52;
  for (size_t i = 0; i < count; ++i) {
    const double g = LoadFloating(type, got, i);
    const double e = LoadFloating(type, expected, i);
    if (g == e || (std::isnan(g) && std::isnan(e))) continue;
    if (op == braidAvg && std::isfinite(e) && e != 0) {
      int exponent;
      std::frexp(e, &exponent);  // |e| in [2^(exponent-1), 2^exponent)
      const double ulp = std::ldexp(1.0, exponent - 1 - mantissa_bits);
      if (std::fabs(g - e) <= 2 * ulp) continue;
    }
    ++wrong;
  }
  return wrong;
}

}  // namespace

int64_t CountWrong(braidDataType_t type, braidRedOp_t op, const void* got, const void* expected,
                   size_t count) {
  const size_t size = TypeSize(type);
  // The common case, all equal (bit for bit), at memcmp speed; elements only where it fails.
  constexpr size_t kBlock = 4096;
  int64_t wrong = 0;
  const char* g = static_cast<const char*>(got);
  const char* e = static_cast<const char*>(expected);
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    if (std::memcmp(g + start * size, e + start * size, n * size) == 0) continue;
    wrong += CountWrongElements(type, op, g + start * size, e + start * size, n);
  }
  return wrong;
}

}  // namespace braid::bench
