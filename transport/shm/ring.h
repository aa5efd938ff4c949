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
// Thread safety: one writer and one reader at a time (callers hold their side's lock).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

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

class RingWriter {
 public:
  RingWriter() = default;
  RingWriter(RingControl* control, char* data, uint64_t capacity)
      : control_(control), data_(data), capacity_(capacity) {}

  // Finds room for a record carrying between `min_payload` and `max_payload` bytes (padding to
  // the ring start when that helps). Returns where the payload goes and sets `*granted`, or
  // nullptr when the consumer has not freed enough yet.
  char* Reserve(uint64_t min_payload, uint64_t max_payload, uint64_t* granted);
  // Publishes the record reserved last with `length` <= granted payload bytes.
  void Commit(RecordKind kind, uint32_t length, uint64_t tag, uint64_t total);
  // A whole message of at most kLinePayload bytes as one single-line kStart record: what
  // Reserve + Commit would write, without Reserve's search for room (a line always fits before
  // the ring's end, so it never pads). False, writing nothing, when the ring has no free line.
  // Why: most messages of small collectives fit a line, and Reserve's general path was a third
  // of an 8-byte send's instructions.
  bool TryWriteLine(const void* payload, uint32_t length, uint64_t tag);
  // Stores the bytes published so far in the ring's (informational) head; Commit does so once
  // per quarter of the ring and Reserve whenever it finds no room (see ring.cc for why not on
  // every record).
  void PublishHead();
  // Largest payload one record may carry (a quarter of the ring: pieces keep both sides busy).
  uint64_t max_record_payload() const { return capacity_ / 4 - sizeof(RecordHeader); }

 private:
  // Free bytes by the cached tail, keeping one line in reserve for the next record's stamp.
  uint64_t Free() const;
  void Publish(uint64_t position, RecordKind kind, uint32_t length, uint64_t tag, uint64_t total);

  RingControl* control_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
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
