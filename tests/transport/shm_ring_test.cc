// transport/shm/ring.h on its own (one thread, no segment file): records come out as they went
// in, across wrap-arounds, and the informational head shows how far the producer got whenever it
// finds the ring full.
#include <catch2/catch.hpp>

#include <algorithm>
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

// A ring with a hot window (ring.h): while every record is read before the next is written, the
// producer keeps to the window; a consumer that falls behind gets the whole ring; records come out
// in order either way.
TEST_CASE("shm ring: a producer keeps to its hot window while the consumer keeps up") {
  constexpr uint64_t kHot = kCapacity / 4;
  constexpr size_t kBytes = 1000;
  TestRing ring;
  ring.writer = RingWriter(&ring.control, ring.data, kCapacity, kHot);
  uint64_t number = 0;
  auto write = [&]() {
    uint64_t granted = 0;
    char* payload = ring.writer.Reserve(kBytes, kBytes, &granted);
    if (payload == nullptr) return static_cast<char*>(nullptr);
    REQUIRE(granted == kBytes);
    const std::vector<char> bytes = PayloadOf(number, kBytes);
    std::memcpy(payload, bytes.data(), kBytes);
    ring.writer.Commit(RecordKind::kStart, kBytes, number, kBytes);
    ++number;
    return payload;
  };
  uint64_t read = 0;
  auto read_one = [&]() {
    const RecordHeader* record = ring.reader.Peek();
    REQUIRE(record != nullptr);
    REQUIRE(record->tag == read);
    const std::vector<char> bytes = PayloadOf(read, kBytes);
    REQUIRE(std::memcmp(RingReader::Payload(record), bytes.data(), kBytes) == 0);
    ring.reader.Consume(record);
    ++read;
  };
  // Read as written: every payload starts inside the window (a record may end just past it).
  for (int i = 0; i < 500; ++i) {
    char* payload = write();
    REQUIRE(payload != nullptr);
    CHECK(static_cast<uint64_t>(payload - ring.data) < kHot);
    read_one();
  }
  // Nobody reads: the producer goes on past the window until the whole ring is full.
  uint64_t furthest = 0;
  int accepted = 0;
  while (char* payload = write()) {
    furthest = std::max<uint64_t>(furthest, static_cast<uint64_t>(payload - ring.data));
    ++accepted;
  }
  CHECK(accepted > static_cast<int>(kHot / kBytes) * 2);
  CHECK(furthest >= kCapacity / 2);
  while (read < number) read_one();
  CHECK(ring.reader.Peek() == nullptr);
  // Caught up again: back to the window (a pad takes the producer to the ring start).
  for (int i = 0; i < 200; ++i) {
    REQUIRE(write() != nullptr);
    read_one();
  }
  char* payload = write();
  REQUIRE(payload != nullptr);
  CHECK(static_cast<uint64_t>(payload - ring.data) < kHot);
  read_one();
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
