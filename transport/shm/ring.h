// Ring: a lock-free single-producer/single-consumer byte ring of records inside a segment.
//
// Why records with stamps: the consumer polls the stamp of the record at its tail instead of the
// producer's head, so a small message costs the consumer one cache miss (the record's line holds
// stamp, header and up to 32 payload bytes) rather than two (head, then record).
//
// A record is a 32-byte header and its payload, padded to 64 bytes; records never wrap: one that
// does not fit before the end of the ring follows a pad record. The producer writes the payload,
// then the header, then stores the stamp (~position) with release order; the consumer loads it
// with acquire order. Stale bytes at the consumer's next position could hold anything, so before
// publishing a record the producer zeroes the stamp slot where the next record will start (it
// keeps one cache line of the ring free for that); the consumer therefore never mistakes old data
// for a record.
//
// A hot window: a producer may keep to the first `hot_bytes` of a larger ring while its consumer
// keeps up. Once past them it pads back to the ring start whenever it finds the ring empty, so
// a link whose messages are read as they come touches only that much memory (it stays in cache,
// as a small ring does), while a consumer that falls behind (it is not running: more ranks than
// CPUs) still finds the whole ring filled for it (ring_size.h says why a ring is then larger).
//
// Thread safety: one writer and one reader at a time (callers hold their side's lock).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/shm/segment.h"

namespace braid::transport::shm {

enum class RecordKind : uint32_t {
  kPad = 1,     // skip to the end of the ring
  kStart = 2,   // first piece of a message: tag, total bytes, `length` payload bytes
  kMore = 3,    // next piece of the message in progress
  kRemote = 4,  // a message the consumer copies from the producer's memory (payload: RemoteRef)
};

struct RecordHeader {
  std::atomic<uint64_t> stamp;  // ~(ring position) once complete; 0 = nothing yet
  RecordKind kind;
  uint32_t length;  // payload bytes in this record
  uint64_t tag;     // kStart, kRemote
  uint64_t total;   // message bytes (kStart, kRemote)
};
static_assert(sizeof(RecordHeader) == 32, "record header layout");

struct RemoteRef {
  uint64_t address;   // the sender's buffer, in the sender's address space
  uint64_t sequence;  // 0, 1, 2... per direction; remote_done passes it once copied
};

constexpr uint64_t kRecordAlign = kCacheLine;
// Payload bytes that fit in the line of a record's header.
constexpr uint64_t kLinePayload = kRecordAlign - sizeof(RecordHeader);
inline uint64_t RecordBytes(uint64_t payload) {
  return (sizeof(RecordHeader) + payload + kRecordAlign - 1) & ~(kRecordAlign - 1);
}

// Copies `n` <= kLinePayload bytes as at most two fixed-size (overlapping) moves each way. Why:
// a memcpy of a length known only at run time is a library call, ~25 instructions for the 8
// bytes of a small allreduce, once into the ring and once out of it.
inline void CopyLinePayload(void* dst, const void* src, size_t n) {
  static_assert(kLinePayload == 32, "two moves of up to 16 bytes cover a line's payload");
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (n >= 16) {
    std::memcpy(d, s, 16);
    std::memcpy(d + n - 16, s + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(d, s, 8);
    std::memcpy(d + n - 8, s + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(d, s, 4);
    std::memcpy(d + n - 4, s + n - 4, 4);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  }
}

class RingWriter {
 public:
  RingWriter() = default;
  // `hot_bytes` (<= capacity; 0 or more than it: the whole ring): the hot window (see the top).
  RingWriter(RingControl* control, char* data, uint64_t capacity, uint64_t hot_bytes = 0)
      : control_(control),
        data_(data),
        capacity_(capacity),
        hot_bytes_(hot_bytes == 0 || hot_bytes > capacity ? capacity : hot_bytes) {}

  // Finds room for a record carrying between `min_payload` and `max_payload` bytes (padding to
  // the ring start when that helps). Returns where the payload goes and sets `*granted`, or
  // nullptr when the consumer has not freed enough yet.
  char* Reserve(uint64_t min_payload, uint64_t max_payload, uint64_t* granted);
  // Publishes the record reserved last with `length` <= granted payload bytes.
  void Commit(RecordKind kind, uint32_t length, uint64_t tag, uint64_t total) {
    Publish(head_, kind, length, tag, total);
    const uint64_t before = head_;
    head_ += RecordBytes(length);
    // control_->head is informational (nobody reads it to find records), and it shares its cache
    // line with want_doorbell, which the consumer reads after every record it consumes. Storing
    // it per record made that line bounce between the cores twice per message (the producer's
    // store, then the consumer's load), a cache miss on each side of every small message. It is
    // therefore published once per quarter of the ring, and whenever the producer finds the ring
    // full (PublishHead), which is when someone reading a core dump wants to know where it stood.
    // (capacity_ is a power of two: head crossed a quarter boundary iff a bit at or above the
    // quarter's changed.)
    if (((before ^ head_) & ~(capacity_ / 4 - 1)) != 0) PublishHead();
  }
  // A whole message of at most kLinePayload bytes as one single-line kStart record: what
  // Reserve + Commit would write, without Reserve's search for room (a line always fits before
  // the ring's end, so it never pads). False, writing nothing, when the ring has no free line.
  // Why: most messages of small collectives fit a line, and Reserve's general path was a third
  // of an 8-byte send's instructions.
  // Inline, as are Commit and Publish: this is the whole send of a small message.
  bool TryWriteLine(const void* payload, uint32_t length, uint64_t tag) {
    if (Free() < kRecordAlign) {
      cached_tail_ = control_->tail.load(std::memory_order_acquire);
      if (Free() < kRecordAlign) return false;
    }
    CopyLinePayload(data_ + (head_ & (capacity_ - 1)) + sizeof(RecordHeader), payload, length);
    Commit(RecordKind::kStart, length, tag, length);
    return true;
  }
  // Stores the bytes published so far in the ring's (informational) head; Commit does so once
  // per quarter of the ring and Reserve whenever it finds no room (see ring.cc for why not on
  // every record).
  void PublishHead();
  // Largest payload one record may carry (a quarter of the ring: pieces keep both sides busy).
  uint64_t max_record_payload() const { return capacity_ / 4 - sizeof(RecordHeader); }

 private:
  // Free bytes by the cached tail, keeping one line in reserve for the next record's stamp.
  uint64_t Free() const { return capacity_ - kRecordAlign - (head_ - cached_tail_); }
  // Past the hot window with the ring empty: pads to the ring start (see the top).
  void ReturnToHotWindow();
  void Publish(uint64_t position, RecordKind kind, uint32_t length, uint64_t tag, uint64_t total) {
    const uint64_t offset = position & (capacity_ - 1);
    const uint64_t size = kind == RecordKind::kPad ? capacity_ - offset : RecordBytes(length);
    // Zero the stamp where the next record will start (inside the reserved free line).
    auto* next = reinterpret_cast<RecordHeader*>(data_ + ((offset + size) & (capacity_ - 1)));
    next->stamp.store(0, std::memory_order_relaxed);
    auto* record = reinterpret_cast<RecordHeader*>(data_ + offset);
    record->kind = kind;
    record->length = length;
    record->tag = tag;
    record->total = total;
    record->stamp.store(~position, std::memory_order_release);
  }

  RingControl* control_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t hot_bytes_ = 0;
  uint64_t head_ = 0;
  uint64_t cached_tail_ = 0;
};

class RingReader {
 public:
  RingReader() = default;
  RingReader(RingControl* control, char* data, uint64_t capacity)
      : control_(control), data_(data), capacity_(capacity) {}

  // The complete record at the tail (pads skipped), or nullptr if none yet.
  const RecordHeader* Peek();
  // Lock-free check usable without the reader's lock: true if a record may be ready.
  static bool MaybeReady(const RingControl* control, const char* data, uint64_t capacity) {
    uint64_t tail = control->tail.load(std::memory_order_relaxed);
    auto* record = reinterpret_cast<const RecordHeader*>(data + (tail & (capacity - 1)));
    return record->stamp.load(std::memory_order_acquire) == ~tail;
  }
  static const char* Payload(const RecordHeader* record) {
    return reinterpret_cast<const char*>(record) + sizeof(RecordHeader);
  }
  // Moves past the record Peek() returned and publishes the new tail.
  void Consume(const RecordHeader* record);

 private:
  RingControl* control_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;
};

}  // namespace braid::transport::shm
