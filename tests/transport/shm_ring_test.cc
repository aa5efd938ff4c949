// transport/shm/ring.h on its own (one thread, no segment file): records come out as they went
// in, across wrap-arounds, and the informational head shows how far the producer got whenever it
// finds the ring full.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "transport/shm/ring.h"
#include "transport/shm/segment.h"

namespace braid::transport::shm {
namespace {

constexpr uint64_t kCapacity = 64 * 1024;

struct TestRing {
  TestRing() : data(static_cast<char*>(::operator new(kCapacity, std::align_val_t(kCacheLine)))) {
    std::memset(data, 0, kCapacity);
    control.head.store(0);
    control.tail.store(0);
    control.want_doorbell.store(0);
    writer = RingWriter(&control, data, kCapacity);
    reader = RingReader(&control, data, kCapacity);
  }
  ~TestRing() { ::operator delete(data, std::align_val_t(kCacheLine)); }

  RingControl control;
  char* data;
  RingWriter writer;
  RingReader reader;
};

// A message's payload: bytes derived from its number, so a reader can check them on its own.
std::vector<char> PayloadOf(uint64_t number, size_t bytes) {
  std::vector<char> payload(bytes);
  for (size_t i = 0; i < bytes; ++i) payload[i] = static_cast<char>(number * 131 + i * 7);
  return payload;
}

TEST_CASE("shm ring: records arrive in order with their contents across wrap-arounds") {
  TestRing ring;
  std::mt19937 random(7);
  std::deque<std::pair<uint64_t, size_t>> in_flight;  // (message number, bytes) not yet read
  uint64_t written = 0, read = 0;
  while (read < 20000) {
    // Write until the ring is full or a random stop, then read a random number of records.
    while (written < 20000 && random() % 4 != 0) {
      const size_t bytes = random() % 3 == 0 ? random() % 2000 : random() % 40;
      uint64_t granted = 0;
      char* payload = ring.writer.Reserve(bytes, bytes, &granted);
      if (payload == nullptr) break;
      REQUIRE(granted == bytes);
      const std::vector<char> expected = PayloadOf(written, bytes);
      if (bytes > 0) std::memcpy(payload, expected.data(), bytes);
      ring.writer.Commit(RecordKind::kStart, static_cast<uint32_t>(bytes), written, bytes);
      in_flight.emplace_back(written, bytes);
      ++written;
    }
    for (int k = random() % 8; k >= 0 && !in_flight.empty(); --k) {
      const RecordHeader* record = ring.reader.Peek();
      REQUIRE(record != nullptr);
      const auto [number, bytes] = in_flight.front();
      REQUIRE(record->kind == RecordKind::kStart);
      REQUIRE(record->tag == number);
      REQUIRE(record->length == bytes);
      const std::vector<char> expected = PayloadOf(number, bytes);
      REQUIRE(std::memcmp(RingReader::Payload(record), expected.data(), bytes) == 0);
      ring.reader.Consume(record);
      in_flight.pop_front();
      ++read;
    }
    if (in_flight.empty()) REQUIRE(ring.reader.Peek() == nullptr);
  }
}

TEST_CASE("shm ring: a producer that finds the ring full publishes how far it got") {
  TestRing ring;
  uint64_t published = 0;  // bytes of ring the records took, counted here independently
  for (;;) {
    uint64_t granted = 0;
    char* payload = ring.writer.Reserve(8, 8, &granted);
    if (payload == nullptr) break;
    ring.writer.Commit(RecordKind::kStart, 8, 0, 8);
    published += 64;  // a 32-byte header and 8 payload bytes, padded to a cache line
  }
  // Full means all but the line kept free for the next record's stamp.
  CHECK(published == kCapacity - kCacheLine);
  CHECK(ring.control.head.load() == published);
}

TEST_CASE("shm ring: one-line records (TryWriteLine) mix with others across wrap-arounds") {
  TestRing ring;
  std::mt19937 random(11);
  std::deque<std::pair<uint64_t, size_t>> in_flight;
  uint64_t written = 0, read = 0;
  while (read < 20000) {
    while (written < 20000 && random() % 4 != 0) {
      // Mostly one-line messages (0..32 bytes), some larger ones that may force a pad record.
      const bool line = random() % 5 != 0;
      const size_t bytes = line ? random() % (kLinePayload + 1) : 33 + random() % 3000;
      const std::vector<char> expected = PayloadOf(written, bytes);
      if (line) {
        if (!ring.writer.TryWriteLine(expected.data(), static_cast<uint32_t>(bytes), written)) break;
      } else {
        uint64_t granted = 0;
        char* payload = ring.writer.Reserve(bytes, bytes, &granted);
        if (payload == nullptr) break;
        std::memcpy(payload, expected.data(), bytes);
        ring.writer.Commit(RecordKind::kStart, static_cast<uint32_t>(bytes), written, bytes);
      }
      in_flight.emplace_back(written++, bytes);
    }
    for (uint64_t n = random() % 64; n > 0 && !in_flight.empty(); --n) {
      const RecordHeader* record = ring.reader.Peek();
      REQUIRE(record != nullptr);
      const auto [number, bytes] = in_flight.front();
      in_flight.pop_front();
      REQUIRE(record->kind == RecordKind::kStart);
      REQUIRE(record->tag == number);
      REQUIRE(record->total == bytes);
      REQUIRE(record->length == bytes);
      const std::vector<char> expected = PayloadOf(number, bytes);
      REQUIRE(std::memcmp(RingReader::Payload(record), expected.data(), bytes) == 0);
      ring.reader.Consume(record);
      ++read;
    }
  }
  CHECK(ring.reader.Peek() == nullptr);
}

TEST_CASE("shm ring: TryWriteLine fills the ring exactly as Reserve does, then refuses") {
  TestRing ring;
  const char byte = 42;
  uint64_t lines = 0;
  // Bounded, so a writer that never refuses fails the check below instead of looping forever.
  while (lines <= kCapacity / kCacheLine && ring.writer.TryWriteLine(&byte, 1, lines)) ++lines;
  CHECK(lines * kCacheLine == kCapacity - kCacheLine);
  uint64_t granted = 0;
  CHECK(ring.writer.Reserve(1, 1, &granted) == nullptr);
  // Freeing one record makes room for exactly one more line.
  const RecordHeader* first = ring.reader.Peek();
  REQUIRE(first != nullptr);
  CHECK(first->tag == 0);
  ring.reader.Consume(first);
  CHECK(ring.writer.TryWriteLine(&byte, 1, lines));
  CHECK_FALSE(ring.writer.TryWriteLine(&byte, 1, lines + 1));
}

}  // namespace
}  // namespace braid::transport::shm
