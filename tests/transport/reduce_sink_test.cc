// algorithms::ReduceSink, the consumer the reducing algorithms hand to Connection::PostRecvInto,
// fed directly with pieces cut anywhere (a transport may split an element between pieces) and
// checked against a reference computed here, element by element, from the operands' values.
// Over a real connection: tests/transport/shm_process_test ("ReduceSink on PostRecvInto").
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "algorithms/reduce_sink.h"

namespace braid::algorithms {
namespace {

// The reference: a op b for one element, in the element's own type (integers wrap, computed in
// the unsigned type; kAvg sums, the caller divides). Max/min of equal values: any (values here
// are distinct or equal in bits).
template <typename T>
struct Wide {
  using type = T;  // floating point: its own type
};
template <>
struct Wide<int8_t> {
  using type = uint8_t;
};
template <>
struct Wide<int32_t> {
  using type = uint32_t;
};
template <>
struct Wide<int64_t> {
  using type = uint64_t;
};

template <typename T>
T Apply(ReduceOp op, T a, T b) {
  using U = typename Wide<T>::type;  // integers wrap: computed unsigned
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    case ReduceOp::kMax:
      return a < b ? b : a;
    case ReduceOp::kMin:
      return b < a ? b : a;
  }
  return a;
}

// Small values (exact in every type, products too), signed where the type is.
template <typename T>
std::vector<T> Values(size_t count, int seed) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) {
    const int x = static_cast<int>((i * 7 + static_cast<size_t>(seed) * 13) % 19) - 9;
    v[i] = static_cast<T>(std::is_signed_v<T> || std::is_floating_point_v<T> ? x : x + 9);
  }
  return v;
}

// Pieces of random lengths (from 1 byte, so elements split) tiling `bytes`, or one piece.
std::vector<size_t> Cuts(size_t bytes, unsigned seed, bool whole) {
  std::vector<size_t> lengths;
  if (whole) {
    if (bytes > 0) lengths.push_back(bytes);
    return lengths;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> piece(1, 23);
  for (size_t done = 0; done < bytes;) {
    const size_t length = std::min(piece(rng), bytes - done);
    lengths.push_back(length);
    done += length;
  }
  return lengths;
}

template <typename T>
std::string Check(DataType type) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                          ReduceOp::kAvg};
  for (ReduceOp op : ops) {
    for (int variant = 0; variant < 8; ++variant) {
      const bool message_first = (variant & 1) != 0;
      const bool in_place = (variant & 2) != 0;
      const bool whole = (variant & 4) != 0;
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{100}, size_t{1037}}) {
        const std::vector<T> own = Values<T>(count, 1);
        const std::vector<T> message = Values<T>(count, 2);
        std::vector<T> own_copy = own;
        std::vector<T> out(count, static_cast<T>(99));
        T* dst = in_place ? own_copy.data() : out.data();
        ReduceSink sink(dst, own_copy.data(), type, op, message_first);
        const char* bytes = reinterpret_cast<const char*>(message.data());
        size_t offset = 0;
        for (size_t length : Cuts(count * sizeof(T), static_cast<unsigned>(count + variant), whole)) {
          // Each piece from a buffer of its own, as a ring slot would be: the sink may only read
          // [data, data + length) during the call.
          std::vector<char> piece(bytes + offset, bytes + offset + length);
          sink.Land(offset, piece.data(), length);
          std::fill(piece.begin(), piece.end(), static_cast<char>(0x5A));
          offset += length;
        }
        for (size_t i = 0; i < count; ++i) {
          const T want = message_first ? Apply(op, message[i], own[i]) : Apply(op, own[i], message[i]);
          if (std::memcmp(&dst[i], &want, sizeof(T)) != 0) {
            return std::string(DataTypeName(type)) + " " + ReduceOpName(op) + ", " +
                   std::to_string(count) + " elements" + (message_first ? ", message first" : "") +
                   (in_place ? ", in place" : "") + (whole ? ", one piece" : ", split pieces") +
                   ": element " + std::to_string(i) + " is wrong";
          }
        }
      }
    }
  }
  return "";
}

TEST_CASE("ReduceSink reduces pieces cut anywhere, every type and op, both operand orders, in "
          "and out of place",
          "[reduce_sink]") {
  CHECK(Check<int8_t>(DataType::kInt8) == "");
  CHECK(Check<uint8_t>(DataType::kUint8) == "");
  CHECK(Check<int32_t>(DataType::kInt32) == "");
  CHECK(Check<uint32_t>(DataType::kUint32) == "");
  CHECK(Check<int64_t>(DataType::kInt64) == "");
  CHECK(Check<uint64_t>(DataType::kUint64) == "");
  CHECK(Check<float>(DataType::kFloat32) == "");
  CHECK(Check<double>(DataType::kFloat64) == "");
}

TEST_CASE("ReduceSink keeps the operand order: max of +0 and -0 is the second operand",
          "[reduce_sink]") {
  for (bool message_first : {false, true}) {
    CAPTURE(message_first);
    const float own[2] = {0.0f, 0.0f};
    const float message[2] = {-0.0f, -0.0f};
    float out[2] = {1.0f, 1.0f};
    ReduceSink sink(out, own, DataType::kFloat32, ReduceOp::kMax, message_first);
    // Split inside the first element.
    sink.Land(0, message, 3);
    sink.Land(3, reinterpret_cast<const char*>(message) + 3, 5);
    for (float x : out) {
      CHECK(x == 0.0f);
      CHECK(std::signbit(x) == !message_first);  // -0 when the message is second
    }
  }
}

TEST_CASE("ReduceSink after Reset starts a new message (no carry left from the last)",
          "[reduce_sink]") {
  const int32_t own[2] = {10, 20};
  const int32_t message[2] = {1, 2};
  int32_t out[2] = {0, 0};
  ReduceSink sink(out, own, DataType::kInt32, ReduceOp::kSum, false);
  sink.Land(0, message, 2);  // half an element, then the message is abandoned
  sink.Reset(out, own, DataType::kInt32, ReduceOp::kSum, false);
  sink.Land(0, message, 8);
  CHECK(out[0] == 11);
  CHECK(out[1] == 22);
}

TEST_CASE("TakeReduceSinks hands a block out again only once nobody holds any of it",
          "[reduce_sink]") {
  auto first = TakeReduceSinks<4>();
  REQUIRE(first != nullptr);
  auto second = TakeReduceSinks<4>();  // the first is still held: a block of its own
  CHECK(second.get() != first.get());
  const auto* second_block = second.get();
  // A connection still holding one sink of the cached block (a receive a failure left pending)
  // keeps the block from the next collective.
  std::shared_ptr<transport::LandingSink> held(second, &(*second)[2]);
  first.reset();
  second.reset();
  auto third = TakeReduceSinks<4>();
  CHECK(third.get() != second_block);
  const auto* third_block = third.get();
  held.reset();
  third.reset();
  // Nobody holds the cached block now: it is reused, no allocation.
  auto fourth = TakeReduceSinks<4>();
  CHECK(fourth.get() == third_block);
  CHECK(fourth.use_count() == 2);  // the caller and the cache
}

}  // namespace
}  // namespace braid::algorithms
