// ReduceInto / DivideInPlace for every dtype x op against a scalar reference written here, on
// sizes around the vector widths, unaligned buffers and the two allowed aliasings.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "kernels/cpu/reduce.h"
#include "tests/kernels/reference.h"

namespace braid::kernels {
namespace {

using testing::BitsToFloat;
using testing::FloatBits;
using testing::Format;
using testing::kBfloat16;
using testing::kHalf;
using testing::RefDecode;
using testing::RefEncode;
using testing::RefIsNan;

constexpr size_t kSizes[] = {0, 1, 7, 1023, 4099};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                             ReduceOp::kAvg};
constexpr uint8_t kCanary = 0xA5;
constexpr size_t kGuard = 64;  // bytes of canary after every buffer

std::vector<DataType> AllTypes() {
  std::vector<DataType> types;
  for (int t = 0; t < kNumDataTypes; ++t) types.push_back(static_cast<DataType>(t));
  return types;
}

Format FormatOf(DataType t) { return t == DataType::kFloat16 ? kHalf : kBfloat16; }

// ---- Scalar reference -------------------------------------------------------------------------

// Integers: compute wide, then keep the low bits (two's complement), instead of the kernel's
// unsigned-type arithmetic.
template <typename T>
T RefInt(ReduceOp op, T a, T b) {
  using W = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
  const W wa = a, wb = b;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      const unsigned __int128 r = static_cast<unsigned __int128>(wa + wb);
      T out;
      std::memcpy(&out, &r, sizeof(T));  // little-endian: the low bytes
      return out;
    }
    case ReduceOp::kProd: {
      const unsigned __int128 r =
          static_cast<unsigned __int128>(wa) * static_cast<unsigned __int128>(wb);
      T out;
      std::memcpy(&out, &r, sizeof(T));
      return out;
    }
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kMin: return std::min(a, b);
  }
  return 0;
}

// Floating: NaN in, NaN out for max/min; otherwise the larger (smaller), b on equality.
template <typename T>
T RefFloat(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return a > b ? a : b;
    case ReduceOp::kMin:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return a < b ? a : b;
  }
  return 0;
}

uint16_t RefHalfLike(Format f, ReduceOp op, uint16_t a, uint16_t b) {
  const float fa = static_cast<float>(RefDecode(f, a));
  const float fb = static_cast<float>(RefDecode(f, b));
  return static_cast<uint16_t>(RefEncode(f, RefFloat<float>(op, fa, fb)));
}

template <typename T>
T Load(const std::vector<uint8_t>& v, size_t i) {
  T x;
  std::memcpy(&x, v.data() + i * sizeof(T), sizeof(T));
  return x;
}
template <typename T>
void Store(std::vector<uint8_t>& v, size_t i, T x) {
  std::memcpy(v.data() + i * sizeof(T), &x, sizeof(T));
}

std::vector<uint8_t> RefReduce(DataType type, ReduceOp op, const std::vector<uint8_t>& a,
                               const std::vector<uint8_t>& b, size_t n) {
  std::vector<uint8_t> out(a.size());
  for (size_t i = 0; i < n; ++i) {
    switch (type) {
      case DataType::kInt8: Store(out, i, RefInt(op, Load<int8_t>(a, i), Load<int8_t>(b, i))); break;
      case DataType::kUint8: Store(out, i, RefInt(op, Load<uint8_t>(a, i), Load<uint8_t>(b, i))); break;
      case DataType::kInt32: Store(out, i, RefInt(op, Load<int32_t>(a, i), Load<int32_t>(b, i))); break;
      case DataType::kUint32: Store(out, i, RefInt(op, Load<uint32_t>(a, i), Load<uint32_t>(b, i))); break;
      case DataType::kInt64: Store(out, i, RefInt(op, Load<int64_t>(a, i), Load<int64_t>(b, i))); break;
      case DataType::kUint64: Store(out, i, RefInt(op, Load<uint64_t>(a, i), Load<uint64_t>(b, i))); break;
      case DataType::kFloat32: Store(out, i, RefFloat(op, Load<float>(a, i), Load<float>(b, i))); break;
      case DataType::kFloat64: Store(out, i, RefFloat(op, Load<double>(a, i), Load<double>(b, i))); break;
      case DataType::kFloat16:
      case DataType::kBfloat16:
        Store(out, i, RefHalfLike(FormatOf(type), op, Load<uint16_t>(a, i), Load<uint16_t>(b, i)));
        break;
    }
  }
  return out;
}

// Element i of got equals element i of want: bitwise, except that any NaN matches any NaN of
// the same kind (payloads are not part of the contract).
bool SameElement(DataType type, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                 size_t i) {
  const size_t sz = DataTypeSize(type);
  if (std::memcmp(got.data() + i * sz, want.data() + i * sz, sz) == 0) return true;
  switch (type) {
    case DataType::kFloat32: return std::isnan(Load<float>(got, i)) && std::isnan(Load<float>(want, i));
    case DataType::kFloat64: return std::isnan(Load<double>(got, i)) && std::isnan(Load<double>(want, i));
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return RefIsNan(FormatOf(type), Load<uint16_t>(got, i)) &&
             RefIsNan(FormatOf(type), Load<uint16_t>(want, i));
    default: return false;
  }
}

std::string Hex(const std::vector<uint8_t>& v, size_t i, size_t sz) {
  std::ostringstream s;
  s << "0x" << std::hex;
  for (size_t k = sz; k-- > 0;) s << (v[i * sz + k] >> 4) << (v[i * sz + k] & 15);
  return s.str();
}

// Returns "" if the first n elements match, else a description of the first mismatch.
std::string Compare(DataType type, const std::vector<uint8_t>& got,
                    const std::vector<uint8_t>& want, size_t n) {
  const size_t sz = DataTypeSize(type);
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!SameElement(type, got, want, i) && wrong++ == 0) first = i;
  }
  if (wrong == 0) return "";
  std::ostringstream s;
  s << wrong << " wrong of " << n << "; first at " << first << ": got " << Hex(got, first, sz)
    << " want " << Hex(want, first, sz);
  return s.str();
}

// ---- Inputs -----------------------------------------------------------------------------------

// Random-ish contents for n elements: integers are random bits (so sums and products wrap);
// float/double mix moderate values with a sprinkling of 0, -0, +-Inf and NaN; float16/bfloat16
// are random bit patterns (every class: subnormal, Inf, NaN).
std::vector<uint8_t> RandomBuffer(DataType type, size_t n, std::mt19937_64& rng) {
  const size_t sz = DataTypeSize(type);
  std::vector<uint8_t> v(n * sz);
  std::uniform_real_distribution<double> value(-1000.0, 1000.0);
  std::uniform_int_distribution<int> pick(0, 39);
  for (size_t i = 0; i < n; ++i) {
    double special = 0;
    const int p = pick(rng);
    const bool use_special = p < 5;
    if (use_special) {
      const double kSpecials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN};
      special = kSpecials[p];
    }
    switch (type) {
      case DataType::kFloat32:
        Store(v, i, use_special ? static_cast<float>(special) : static_cast<float>(value(rng)));
        break;
      case DataType::kFloat64: Store(v, i, use_special ? special : value(rng) * 1e10); break;
      default: {
        const uint64_t bits = rng();
        std::memcpy(v.data() + i * sz, &bits, sz);
      }
    }
  }
  return v;
}

// A buffer of n elements starting at an odd element offset (so the vector loops peel), followed
// by canary bytes.
struct GuardedBuffer {
  GuardedBuffer(size_t n, size_t elem) : bytes(elem + n * elem + kGuard, kCanary), offset(elem), size(n * elem) {}
  void* data() { return bytes.data() + offset; }
  void Set(const std::vector<uint8_t>& v) { std::memcpy(data(), v.data(), size); }
  std::vector<uint8_t> Get() const {
    return std::vector<uint8_t>(bytes.begin() + offset, bytes.begin() + offset + size);
  }
  bool GuardsIntact() const {
    for (size_t i = 0; i < offset; ++i)
      if (bytes[i] != kCanary) return false;
    for (size_t i = offset + size; i < bytes.size(); ++i)
      if (bytes[i] != kCanary) return false;
    return true;
  }
  std::vector<uint8_t> bytes;
  size_t offset;
  size_t size;
};

std::string Describe(DataType type, ReduceOp op, size_t n, const char* mode) {
  std::ostringstream s;
  s << DataTypeName(type) << " " << ReduceOpName(op) << " count=" << n << " " << mode;
  return s.str();
}

TEST_CASE("ReduceInto matches the scalar reference for every dtype x op", "[kernels][reduce]") {
  std::mt19937_64 rng(2024);
  for (DataType type : AllTypes()) {
    const size_t sz = DataTypeSize(type);
    for (ReduceOp op : kOps) {
      for (size_t n : kSizes) {
        const std::vector<uint8_t> a = RandomBuffer(type, n, rng);
        const std::vector<uint8_t> b = RandomBuffer(type, n, rng);
        const std::vector<uint8_t> want = RefReduce(type, op, a, b, n);

        {  // out distinct from a and b
          GuardedBuffer ga(n, sz), gb(n, sz), out(n, sz);
          ga.Set(a);
          gb.Set(b);
          ReduceInto(type, op, out.data(), ga.data(), gb.data(), n);
          INFO(Describe(type, op, n, "out distinct"));
          CHECK(Compare(type, out.Get(), want, n) == "");
          CHECK(out.GuardsIntact());
          CHECK(ga.Get() == a);
          CHECK(gb.Get() == b);
        }
        {  // out == a
          GuardedBuffer ga(n, sz), gb(n, sz);
          ga.Set(a);
          gb.Set(b);
          ReduceInto(type, op, ga.data(), ga.data(), gb.data(), n);
          INFO(Describe(type, op, n, "out == a"));
          CHECK(Compare(type, ga.Get(), want, n) == "");
          CHECK(ga.GuardsIntact());
          CHECK(gb.Get() == b);
        }
        {  // out == b
          GuardedBuffer ga(n, sz), gb(n, sz);
          ga.Set(a);
          gb.Set(b);
          ReduceInto(type, op, gb.data(), ga.data(), gb.data(), n);
          INFO(Describe(type, op, n, "out == b"));
          CHECK(Compare(type, gb.Get(), want, n) == "");
          CHECK(gb.GuardsIntact());
          CHECK(ga.Get() == a);
        }
        {  // out == a == b
          GuardedBuffer ga(n, sz);
          ga.Set(a);
          ReduceInto(type, op, ga.data(), ga.data(), ga.data(), n);
          INFO(Describe(type, op, n, "out == a == b"));
          CHECK(Compare(type, ga.Get(), RefReduce(type, op, a, a, n), n) == "");
          CHECK(ga.GuardsIntact());
        }
      }
    }
  }
}

// Small integers are exact in every dtype, so the expected results need no rounding at all:
// this pins the float16/bfloat16 paths to arithmetic facts rather than to a reference encoder.
TEST_CASE("ReduceInto on exactly representable small integers", "[kernels][reduce]") {
  const size_t n = 1031;
  for (DataType type : AllTypes()) {
    const size_t sz = DataTypeSize(type);
    for (ReduceOp op : kOps) {
      std::vector<int> x(n), y(n);
      std::vector<uint8_t> a(n * sz), b(n * sz);
      const bool is_unsigned = type == DataType::kUint8 || type == DataType::kUint32 ||
                               type == DataType::kUint64;
      for (size_t i = 0; i < n; ++i) {
        // |x| <= 11, |y| <= 9: every sum and product fits int8 and bfloat16's 8 bits exactly.
        x[i] = is_unsigned ? static_cast<int>(i * 7 % 12) : static_cast<int>(i * 7 % 23) - 11;
        y[i] = is_unsigned ? static_cast<int>(i * 5 % 10) : static_cast<int>(i * 5 % 19) - 9;
      }
      // negative_zero: a zero result that IEEE types carry as -0 (a product of 0 and a negative).
      auto encode = [&](std::vector<uint8_t>& buf, size_t i, int v, bool negative_zero = false) {
        switch (type) {
          case DataType::kInt8: Store(buf, i, static_cast<int8_t>(v)); break;
          case DataType::kUint8: Store(buf, i, static_cast<uint8_t>(v)); break;
          case DataType::kInt32: Store(buf, i, static_cast<int32_t>(v)); break;
          case DataType::kUint32: Store(buf, i, static_cast<uint32_t>(v)); break;
          case DataType::kInt64: Store(buf, i, static_cast<int64_t>(v)); break;
          case DataType::kUint64: Store(buf, i, static_cast<uint64_t>(v)); break;
          case DataType::kFloat32: Store(buf, i, negative_zero ? -0.0f : static_cast<float>(v)); break;
          case DataType::kFloat64: Store(buf, i, negative_zero ? -0.0 : static_cast<double>(v)); break;
          // Small integers by hand: sign | exponent | mantissa of |v| (exact for |v| < 2^8).
          case DataType::kFloat16:
          case DataType::kBfloat16: {
            const Format f = FormatOf(type);
            uint32_t bits = 0;
            const uint32_t mag = static_cast<uint32_t>(v < 0 ? -v : v);
            if (mag != 0) {
              int e = 31 - __builtin_clz(mag);
              const uint32_t man = (mag - (1u << e)) << (f.man_bits - e);
              bits = (static_cast<uint32_t>(e + f.bias()) << f.man_bits) | man;
            }
            if (v < 0 || negative_zero) bits |= 1u << (f.exp_bits + f.man_bits);
            Store(buf, i, static_cast<uint16_t>(bits));
            break;
          }
        }
      };
      std::vector<uint8_t> want(n * sz);
      for (size_t i = 0; i < n; ++i) {
        encode(a, i, x[i]);
        encode(b, i, y[i]);
        int r = 0;
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg: r = x[i] + y[i]; break;
          case ReduceOp::kProd: r = x[i] * y[i]; break;
          case ReduceOp::kMax: r = std::max(x[i], y[i]); break;
          case ReduceOp::kMin: r = std::min(x[i], y[i]); break;
        }
        const bool negative_zero = op == ReduceOp::kProd && r == 0 && ((x[i] < 0) != (y[i] < 0));
        encode(want, i, r, negative_zero);
      }
      std::vector<uint8_t> out(n * sz);
      ReduceInto(type, op, out.data(), a.data(), b.data(), n);
      INFO(DataTypeName(type) << " " << ReduceOpName(op));
      CHECK(Compare(type, out, want, n) == "");
    }
  }
}

TEST_CASE("Floating max/min propagate NaN in either position", "[kernels][reduce]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float xs[] = {nan, 1.0f, nan, -inf, inf, -0.0f};
  const float ys[] = {1.0f, nan, nan, nan, 2.0f, 0.0f};
  const size_t n = 6;
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    INFO(ReduceOpName(op));
    const float want_finite = op == ReduceOp::kMax ? inf : 2.0f;
    {
      float out[n];
      ReduceInto(DataType::kFloat32, op, out, xs, ys, n);
      for (size_t i = 0; i < 4; ++i) CHECK(std::isnan(out[i]));
      CHECK(out[4] == want_finite);
      CHECK(FloatBits(out[5]) == FloatBits(ys[5]));  // equal values: b
    }
    {
      double x[n], y[n], out[n];
      for (size_t i = 0; i < n; ++i) x[i] = xs[i], y[i] = ys[i];
      ReduceInto(DataType::kFloat64, op, out, x, y, n);
      for (size_t i = 0; i < 4; ++i) CHECK(std::isnan(out[i]));
      CHECK(out[4] == want_finite);
    }
    for (DataType type : {DataType::kFloat16, DataType::kBfloat16}) {
      const Format f = FormatOf(type);
      uint16_t x[n], y[n], out[n];
      for (size_t i = 0; i < n; ++i) {
        x[i] = static_cast<uint16_t>(RefEncode(f, xs[i]));
        y[i] = static_cast<uint16_t>(RefEncode(f, ys[i]));
      }
      ReduceInto(type, op, out, x, y, n);
      for (size_t i = 0; i < 4; ++i) CHECK(RefIsNan(f, out[i]));
      CHECK(RefDecode(f, out[4]) == want_finite);
    }
  }
}

TEST_CASE("Integer sum and product wrap modulo 2^bits", "[kernels][reduce]") {
  {
    int8_t a[] = {127, -128, 100, -100, 16}, b[] = {1, -1, 100, -100, 16}, out[5];
    ReduceInto(DataType::kInt8, ReduceOp::kSum, out, a, b, 5);
    CHECK(std::vector<int8_t>(out, out + 5) == std::vector<int8_t>{-128, 127, -56, 56, 32});
    ReduceInto(DataType::kInt8, ReduceOp::kProd, out, a, b, 5);
    CHECK(std::vector<int8_t>(out, out + 5) == std::vector<int8_t>{127, -128, 16, 16, 0});
  }
  {
    uint8_t a[] = {255, 16}, b[] = {1, 17}, out[2];
    ReduceInto(DataType::kUint8, ReduceOp::kSum, out, a, b, 2);
    CHECK(out[0] == 0);
    CHECK(out[1] == 33);
    ReduceInto(DataType::kUint8, ReduceOp::kProd, out, a, b, 2);
    CHECK(out[0] == 255);
    CHECK(out[1] == 16);  // 272 mod 256
  }
  {
    const int32_t max = std::numeric_limits<int32_t>::max(), min = std::numeric_limits<int32_t>::min();
    int32_t a[] = {max, min, 65536}, b[] = {1, -1, 65536}, out[3];
    ReduceInto(DataType::kInt32, ReduceOp::kSum, out, a, b, 3);
    CHECK(out[0] == min);
    CHECK(out[1] == max);
    ReduceInto(DataType::kInt32, ReduceOp::kProd, out, a, b, 3);
    CHECK(out[2] == 0);
  }
  {
    const int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
    int64_t a[] = {max, min}, b[] = {1, -1}, c[] = {2, 2}, out[2];
    ReduceInto(DataType::kInt64, ReduceOp::kSum, out, a, b, 2);
    CHECK(out[0] == min);
    CHECK(out[1] == max);
    ReduceInto(DataType::kInt64, ReduceOp::kProd, out, a, c, 2);
    CHECK(out[0] == -2);
    CHECK(out[1] == 0);
    uint64_t u[] = {~0ull}, v[] = {~0ull}, w[1];
    ReduceInto(DataType::kUint64, ReduceOp::kProd, w, u, v, 1);
    CHECK(w[0] == 1);
  }
}

TEST_CASE("Invalid dtype or op leaves the output untouched", "[kernels][reduce]") {
  int32_t a[] = {1, 2}, b[] = {3, 4}, out[] = {7, 7};
  ReduceInto(static_cast<DataType>(kNumDataTypes), ReduceOp::kSum, out, a, b, 2);
  ReduceInto(static_cast<DataType>(-1), ReduceOp::kSum, out, a, b, 2);
  ReduceInto(DataType::kInt32, static_cast<ReduceOp>(kNumReduceOps), out, a, b, 2);
  CHECK(out[0] == 7);
  CHECK(out[1] == 7);
  DivideInPlace(static_cast<DataType>(42), out, 2, 2);
  CHECK(out[0] == 7);
}

// ---- DivideInPlace ----------------------------------------------------------------------------

TEST_CASE("DivideInPlace: integers truncate toward zero", "[kernels][divide]") {
  {
    int32_t v[] = {-7, 7, -1, 1, 0, std::numeric_limits<int32_t>::min(),
                   std::numeric_limits<int32_t>::max(), -8};
    DivideInPlace(DataType::kInt32, v, 8, 2);
    CHECK(std::vector<int32_t>(v, v + 8) ==
          std::vector<int32_t>{-3, 3, 0, 0, 0, -1073741824, 1073741823, -4});
  }
  {
    int8_t v[] = {-128, 127, -7, -2, 5};
    DivideInPlace(DataType::kInt8, v, 5, 3);
    CHECK(std::vector<int8_t>(v, v + 5) == std::vector<int8_t>{-42, 42, -2, 0, 1});
  }
  {
    uint8_t v[] = {255, 7};
    DivideInPlace(DataType::kUint8, v, 2, 2);
    CHECK(v[0] == 127);
    CHECK(v[1] == 3);
  }
  {
    int64_t v[] = {std::numeric_limits<int64_t>::min(), -5, 5};
    DivideInPlace(DataType::kInt64, v, 3, 4);
    CHECK(v[0] == std::numeric_limits<int64_t>::min() / 4);
    CHECK(v[1] == -1);
    CHECK(v[2] == 1);
  }
  {
    uint64_t v[] = {~0ull, 10};
    DivideInPlace(DataType::kUint64, v, 2, 3);
    CHECK(v[0] == 6148914691236517205ull);
    CHECK(v[1] == 3);
    uint32_t w[] = {4294967295u};
    DivideInPlace(DataType::kUint32, w, 1, 7);
    CHECK(w[0] == 613566756u);
  }
}

TEST_CASE("DivideInPlace: floating types divide in their own precision", "[kernels][divide]") {
  {
    float v[] = {1.0f, -3.0f, 0.1f};
    DivideInPlace(DataType::kFloat32, v, 3, 3);
    CHECK(v[0] == 1.0f / 3.0f);
    CHECK(v[1] == -1.0f);
    CHECK(v[2] == 0.1f / 3.0f);
  }
  {
    double v[] = {1.0, -3.0};
    DivideInPlace(DataType::kFloat64, v, 2, 3);
    CHECK(v[0] == 1.0 / 3.0);
    CHECK(v[1] == -1.0);
  }
  {
    uint16_t h[] = {0x3C00 /*1*/, 0x4200 /*3*/, 0x0001 /*2^-24*/, 0x7C00 /*inf*/, 0xBC00 /*-1*/};
    DivideInPlace(DataType::kFloat16, h, 5, 3);
    CHECK(h[0] == 0x3555);  // 1/3 rounded to half
    CHECK(h[1] == 0x3C00);
    CHECK(h[2] == 0x0000);  // 2^-24 / 3 underflows to zero
    CHECK(h[3] == 0x7C00);
    CHECK(h[4] == 0xB555);
    uint16_t b[] = {0x3F80 /*1*/, 0x4040 /*3*/};
    DivideInPlace(DataType::kBfloat16, b, 2, 3);
    CHECK(b[0] == 0x3EAB);  // 1/3 = 0x3EAAAAAB as float -> 0x3EAB
    CHECK(b[1] == 0x3F80);
  }
}

TEST_CASE("DivideInPlace matches the scalar reference on every dtype and size", "[kernels][divide]") {
  std::mt19937_64 rng(99);
  for (DataType type : AllTypes()) {
    const size_t sz = DataTypeSize(type);
    for (int divisor : {1, 2, 3, 7, 8, 1000}) {
      for (size_t n : kSizes) {
        const std::vector<uint8_t> in = RandomBuffer(type, n, rng);
        std::vector<uint8_t> want(in.size());
        for (size_t i = 0; i < n; ++i) {
          switch (type) {
            case DataType::kInt8: Store(want, i, static_cast<int8_t>(std::trunc(double(Load<int8_t>(in, i)) / divisor))); break;
            case DataType::kUint8: Store(want, i, static_cast<uint8_t>(Load<uint8_t>(in, i) / divisor)); break;
            case DataType::kInt32: Store(want, i, static_cast<int32_t>(std::trunc(double(Load<int32_t>(in, i)) / divisor))); break;
            case DataType::kUint32: Store(want, i, static_cast<uint32_t>(Load<uint32_t>(in, i) / static_cast<uint32_t>(divisor))); break;
            case DataType::kInt64: {
              // Truncation toward zero without relying on C++'s operator/ for negatives.
              const int64_t x = Load<int64_t>(in, i);
              const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
              const uint64_t q = mag / static_cast<uint64_t>(divisor);
              Store(want, i, x < 0 ? static_cast<int64_t>(0 - q) : static_cast<int64_t>(q));
              break;
            }
            case DataType::kUint64: Store(want, i, Load<uint64_t>(in, i) / static_cast<uint64_t>(divisor)); break;
            case DataType::kFloat32: Store(want, i, Load<float>(in, i) / static_cast<float>(divisor)); break;
            case DataType::kFloat64: Store(want, i, Load<double>(in, i) / static_cast<double>(divisor)); break;
            case DataType::kFloat16:
            case DataType::kBfloat16: {
              const Format f = FormatOf(type);
              const float x = static_cast<float>(RefDecode(f, Load<uint16_t>(in, i)));
              Store(want, i, static_cast<uint16_t>(RefEncode(f, x / static_cast<float>(divisor))));
              break;
            }
          }
        }
        GuardedBuffer buf(n, sz);
        buf.Set(in);
        DivideInPlace(type, buf.data(), n, divisor);
        INFO(DataTypeName(type) << " / " << divisor << " count=" << n);
        CHECK(Compare(type, buf.Get(), want, n) == "");
        CHECK(buf.GuardsIntact());
      }
    }
  }
}

TEST_CASE("DivideInPlace: divisor < 1 leaves the buffer untouched", "[kernels][divide]") {
  int32_t v[] = {10, -10};
  DivideInPlace(DataType::kInt32, v, 2, 0);
  DivideInPlace(DataType::kInt32, v, 2, -1);
  CHECK(v[0] == 10);
  CHECK(v[1] == -10);
}

TEST_CASE("kAvg reduces as a sum; the caller divides once", "[kernels][reduce]") {
  int32_t a[] = {-3, 4, 5}, b[] = {-4, 4, 6}, out[3];
  ReduceInto(DataType::kInt32, ReduceOp::kAvg, out, a, b, 3);
  CHECK(std::vector<int32_t>(out, out + 3) == std::vector<int32_t>{-7, 8, 11});
  DivideInPlace(DataType::kInt32, out, 3, 2);
  CHECK(std::vector<int32_t>(out, out + 3) == std::vector<int32_t>{-3, 4, 5});
}

}  // namespace
}  // namespace braid::kernels
