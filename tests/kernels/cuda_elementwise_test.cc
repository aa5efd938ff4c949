// The CUDA kernels' element-wise code (kernels/cuda/elementwise.h, pack.h) compiled by the host
// C++ compiler and checked against kernels/cpu for every dtype x op: odd sizes, pointers at every
// offset within a 16-byte pack (head, packs, tail, and the all-scalar path of mismatched
// offsets), in place, NaN, +-0, Inf, subnormals and float16/bfloat16 rounding ties; float16 and
// bfloat16 also against tests/kernels/reference.h's textbook rounding. Runs in CPU-only CI; the
// same code on the GPU is tests/gpu/kernels_gpu_test.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/pack.h"
#include "tests/kernels/element_compare.h"
#include "tests/kernels/reference.h"

namespace braid::kernels::cuda {
namespace {

using testing::FirstMismatch;
using testing::Format;
using testing::MakeInput;
using testing::RefDecode;
using testing::RefEncode;
using testing::RefIsNan;

constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,  DataType::kInt64,
    DataType::kUint64,  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kBfloat16,
};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                                ReduceOp::kAvg};

// Runs body<T, Op>(...) for the dtype and op through the header's own dispatch.
template <typename Body>
void WithTypes(DataType type, ReduceOp op, Body&& body) {
  const bool type_ok = DispatchElement(type, [&](auto element) {
    using T = typename decltype(element)::Type;
    const bool op_ok = DispatchOp(op, [&](auto functor) {
      using Op = typename decltype(functor)::Type;
      body(element, functor);
      (void)sizeof(T);
      (void)sizeof(Op);
    });
    REQUIRE(op_ok);
  });
  REQUIRE(type_ok);
}

// Where the three buffers start, in bytes past a 16-byte boundary.
struct Layout {
  const char* name;
  size_t out_offset, a_offset, b_offset;  // in elements
  bool in_place;                          // out is a
};

TEST_CASE("CUDA element-wise reduction code equals kernels/cpu for every dtype x op", "[cuda][kernels]") {
  std::mt19937_64 rng(20261125);
  const size_t kCounts[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 33, 257, 1001};
  const size_t kWorkers[] = {1, 3, 64};
  const int kDivisor = 3;
  for (DataType type : kAllTypes) {
    const size_t size = DataTypeSize(type);
    const Layout kLayouts[] = {
        {"aligned", 0, 0, 0, false},
        {"all one element past a boundary", 1, 1, 1, false},
        {"offsets differ (scalar path)", 0, 1, 0, false},
        {"in place", 0, 0, 0, true},
        {"in place, offset", 3, 3, 3, true},
    };
    for (ReduceOp op : kAllOps) {
      for (size_t count : kCounts) {
        const std::vector<uint8_t> a_data = MakeInput(type, count, rng);
        const std::vector<uint8_t> b_data = MakeInput(type, count, rng);
        std::vector<uint8_t> expected(count * size + 1);
        kernels::ReduceInto(type, op, expected.data(), a_data.data(), b_data.data(), count);
        if (op == ReduceOp::kAvg) kernels::DivideInPlace(type, expected.data(), count, kDivisor);
        for (const Layout& layout : kLayouts) {
          if (layout.out_offset * size >= kPackBytes || layout.a_offset * size >= kPackBytes) {
            continue;  // 8-byte types have only offsets 0 and 1 within a pack
          }
          for (size_t workers : kWorkers) {
            // 16-byte aligned arenas, inputs copied in at their layout's offset.
            std::vector<Pack<uint8_t>> a_arena(count * size / kPackBytes + 2);
            std::vector<Pack<uint8_t>> b_arena(count * size / kPackBytes + 2);
            std::vector<Pack<uint8_t>> out_arena(count * size / kPackBytes + 2);
            std::vector<Pack<uint8_t>> copy_arena(count * size / kPackBytes + 2);
            uint8_t* a = reinterpret_cast<uint8_t*>(a_arena.data()) + layout.a_offset * size;
            uint8_t* b = reinterpret_cast<uint8_t*>(b_arena.data()) + layout.b_offset * size;
            uint8_t* out = layout.in_place ? a : reinterpret_cast<uint8_t*>(out_arena.data()) + layout.out_offset * size;
            uint8_t* copy = reinterpret_cast<uint8_t*>(copy_arena.data()) + layout.out_offset * size;
            std::memcpy(a, a_data.data(), count * size);
            std::memcpy(b, b_data.data(), count * size);
            const bool with_copy = workers == 3;  // the reduce-copy move, on one of the worker counts
            WithTypes(type, op, [&](auto element, auto functor) {
              using T = typename decltype(element)::Type;
              using Op = typename decltype(functor)::Type;
              for (size_t w = 0; w < workers; ++w) {
                ReduceShare<T, Op>(reinterpret_cast<T*>(out), with_copy ? reinterpret_cast<T*>(copy) : nullptr,
                                   reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b), count, w, workers);
              }
              if (op == ReduceOp::kAvg) {
                for (size_t w = 0; w < workers; ++w) DivideShare<T>(reinterpret_cast<T*>(out), count, kDivisor, w, workers);
                if (with_copy) {
                  for (size_t w = 0; w < workers; ++w) DivideShare<T>(reinterpret_cast<T*>(copy), count, kDivisor, w, workers);
                }
              }
            });
            INFO(DataTypeName(type) << " " << ReduceOpName(op) << " count " << count << ", " << layout.name
                                    << ", " << workers << " workers" << (with_copy ? ", with copy" : ""));
            CHECK(FirstMismatch(type, expected.data(), out, count) == "");
            if (with_copy) CHECK(FirstMismatch(type, expected.data(), copy, count) == "");
          }
        }
      }
    }
  }
}

// The many-input reduction (one-shot allreduce's kernel) against a left fold of kernels/cpu's
// two-input ReduceInto, in input order: bit-identical, floats included.
TEST_CASE("CUDA many-input reduction equals a left fold of kernels/cpu", "[cuda][kernels]") {
  std::mt19937_64 rng(99);
  for (DataType type : kAllTypes) {
    const size_t size = DataTypeSize(type);
    for (ReduceOp op : kAllOps) {
      for (int n : {1, 2, 3, kMaxInputs}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{9}, size_t{33}, size_t{517}}) {
          std::vector<std::vector<uint8_t>> data;
          for (int k = 0; k < n; ++k) data.push_back(MakeInput(type, count, rng));
          std::vector<uint8_t> expected = data[0];
          expected.resize(count * size + 1);
          for (int k = 1; k < n; ++k) {
            kernels::ReduceInto(type, op, expected.data(), expected.data(), data[k].data(), count);
          }
          // offset 0: packs; 1 element: a head; input 1 shifted alone: the all-scalar path.
          for (int layout = 0; layout < 3; ++layout) {
            const size_t offset = layout == 0 ? 0 : size % kPackBytes == 0 ? 0 : size;
            std::vector<std::vector<Pack<uint8_t>>> arenas(n + 1, std::vector<Pack<uint8_t>>(count * size / kPackBytes + 3));
            std::vector<uint8_t*> in(n);
            for (int k = 0; k < n; ++k) {
              const size_t shift = (layout == 2 && k == 1) ? size : offset;
              in[k] = reinterpret_cast<uint8_t*>(arenas[k].data()) + shift;
              std::memcpy(in[k], data[k].data(), count * size);
            }
            uint8_t* out = reinterpret_cast<uint8_t*>(arenas[n].data()) + offset;
            for (size_t workers : {size_t{1}, size_t{3}}) {
              const bool ok = DispatchElement(type, [&](auto element) {
                using T = typename decltype(element)::Type;
                Inputs<T> inputs{};
                inputs.count = n;
                for (int k = 0; k < n; ++k) inputs.ptr[k] = reinterpret_cast<const T*>(in[k]);
                DispatchOp(op, [&](auto functor) {
                  using Op = typename decltype(functor)::Type;
                  for (size_t w = 0; w < workers; ++w) {
                    ReduceManyShare<T, Op>(reinterpret_cast<T*>(out), inputs, count, w, workers);
                  }
                });
              });
              REQUIRE(ok);
              INFO(DataTypeName(type) << " " << ReduceOpName(op) << ", " << n << " inputs, count " << count
                                      << ", layout " << layout << ", " << workers << " workers");
              CHECK(FirstMismatch(type, expected.data(), out, count) == "");
            }
          }
        }
      }
    }
  }
}

// float16 and bfloat16 against the textbook: decode both inputs exactly (double), apply the op
// exactly or nearly so (a sum or product of two such values needs at most 48 significant bits,
// except a bfloat16 sum across ~100 binades, where double rounds once and the rounding to
// bfloat16 after it is still correct since 53 >= 2 * 8 + 2), then round to nearest even. Max/min
// follow kernels/cpu/reduce.h: NaN wins, equal values give b.
void CheckHalfLike(DataType type, Format format) {
  std::mt19937_64 rng(7);
  // Every pair with one operand from a set of corner values, plus random pairs.
  std::vector<uint16_t> corner = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3C01, 0x3BFF};
  const uint16_t inf = static_cast<uint16_t>(((1u << format.exp_bits) - 1) << format.man_bits);
  corner.push_back(inf);
  corner.push_back(static_cast<uint16_t>(inf | 0x8000));
  corner.push_back(static_cast<uint16_t>(inf | 1));                       // a signalling-style NaN
  corner.push_back(static_cast<uint16_t>(inf | (1u << (format.man_bits - 1))));  // quiet NaN
  corner.push_back(static_cast<uint16_t>(inf - 1));                       // the largest finite
  std::vector<std::pair<uint16_t, uint16_t>> pairs;
  for (uint16_t c : corner) {
    for (int k = 0; k < 2000; ++k) {
      const uint16_t r = static_cast<uint16_t>(rng());
      pairs.push_back({c, r});
      pairs.push_back({r, c});
    }
  }
  for (int k = 0; k < 200000; ++k) pairs.push_back({static_cast<uint16_t>(rng()), static_cast<uint16_t>(rng())});
  // Sums that land exactly halfway between two neighbours (ties to even): 1 + 2^-11 in float16,
  // 1 + 2^-8 in bfloat16, scaled over several binades.
  for (int e = format.man_bits + 2 - format.bias(); e <= 10; ++e) {  // half an ulp stays normal
    const uint16_t one = static_cast<uint16_t>((format.bias() + e) << format.man_bits);
    const uint16_t half_ulp = static_cast<uint16_t>((format.bias() + e - format.man_bits - 1) << format.man_bits);
    pairs.push_back({one, half_ulp});
    pairs.push_back({static_cast<uint16_t>(one + 1), half_ulp});
  }

  size_t failures = 0;
  std::string first;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
    for (const auto& [x, y] : pairs) {
      const double dx = RefDecode(format, x);
      const double dy = RefDecode(format, y);
      uint32_t want;
      bool want_nan = false;
      if (op == ReduceOp::kSum || op == ReduceOp::kProd) {
        const double r = op == ReduceOp::kSum ? dx + dy : dx * dy;
        want_nan = std::isnan(r);
        want = RefEncode(format, r);
      } else {
        const bool a_wins = op == ReduceOp::kMax ? dx > dy : dx < dy;
        want = (a_wins || std::isnan(dx)) ? x : y;
        want_nan = std::isnan(dx) || std::isnan(dy);
      }
      uint16_t got_bits = 0;
      WithTypes(type, op, [&](auto element, auto functor) {
        using T = typename decltype(element)::Type;
        using Op = typename decltype(functor)::Type;
        if constexpr (kIsHalfLike<T>) {
          T a, b;
          std::memcpy(static_cast<void*>(&a), &x, 2);  // void*: __half is a class
          std::memcpy(static_cast<void*>(&b), &y, 2);
          const T r = Op{}(a, b);
          std::memcpy(&got_bits, &r, 2);
        }
      });
      const bool ok = want_nan ? RefIsNan(format, got_bits) : got_bits == want;
      if (!ok && failures++ == 0) {
        first = std::string(ReduceOpName(op)) + "(" + std::to_string(x) + ", " + std::to_string(y) +
                "): want bits " + std::to_string(want) + ", got " + std::to_string(got_bits);
      }
    }
  }
  INFO(DataTypeName(type) << ": " << failures << " wrong results; first: " << first);
  CHECK(failures == 0);
}

TEST_CASE("CUDA float16 and bfloat16 functors round like the textbook", "[cuda][kernels]") {
  CheckHalfLike(DataType::kFloat16, testing::kHalf);
  CheckHalfLike(DataType::kBfloat16, testing::kBfloat16);
}

TEST_CASE("CUDA divide equals kernels/cpu's DivideInPlace", "[cuda][kernels]") {
  std::mt19937_64 rng(11);
  for (DataType type : kAllTypes) {
    const size_t size = DataTypeSize(type);
    for (int divisor : {1, 2, 3, 7, 300, 4096}) {
      const size_t count = 131;
      const std::vector<uint8_t> input = MakeInput(type, count, rng);
      std::vector<uint8_t> expected = input;
      kernels::DivideInPlace(type, expected.data(), count, divisor);
      std::vector<Pack<uint8_t>> arena(count * size / kPackBytes + 2);
      uint8_t* buf = reinterpret_cast<uint8_t*>(arena.data()) + size;  // a head, packs and a tail
      std::memcpy(buf, input.data(), count * size);
      const bool ok = DispatchElement(type, [&](auto element) {
        using T = typename decltype(element)::Type;
        for (size_t w = 0; w < 5; ++w) DivideShare<T>(reinterpret_cast<T*>(buf), count, divisor, w, 5);
      });
      REQUIRE(ok);
      INFO(DataTypeName(type) << " / " << divisor);
      CHECK(FirstMismatch(type, expected.data(), buf, count) == "");
    }
  }
}

TEST_CASE("CUDA copy moves every byte at every offset pair", "[cuda][kernels]") {
  std::mt19937_64 rng(3);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{100}, size_t{4099}}) {
    for (size_t src_offset = 0; src_offset < 16; src_offset += 5) {
      for (size_t dst_offset = 0; dst_offset < 16; dst_offset += 3) {
        std::vector<Pack<uint8_t>> src_arena(bytes / 16 + 2), dst_arena(bytes / 16 + 2);
        uint8_t* src = reinterpret_cast<uint8_t*>(src_arena.data()) + src_offset;
        uint8_t* dst = reinterpret_cast<uint8_t*>(dst_arena.data()) + dst_offset;
        for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(rng());
        for (size_t w = 0; w < 7; ++w) CopyShare(dst, src, bytes, w, 7);
        INFO(bytes << " bytes, offsets " << src_offset << " -> " << dst_offset);
        CHECK(std::memcmp(dst, src, bytes) == 0);
        // Nothing written past the end.
        CHECK(dst[bytes] == 0);
      }
    }
  }
}

TEST_CASE("dispatch refuses invalid enum values without calling", "[cuda][kernels]") {
  int calls = 0;
  CHECK_FALSE(DispatchElement(static_cast<DataType>(10), [&](auto) { ++calls; }));
  CHECK_FALSE(DispatchOp(static_cast<ReduceOp>(-1), [&](auto) { ++calls; }));
  CHECK(calls == 0);
}

}  // namespace
}  // namespace braid::kernels::cuda
