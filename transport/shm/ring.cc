// The record ring (see ring.h for the format and why it is laid out so).
#include "transport/shm/ring.h"

#include <algorithm>
#include <cstring>

namespace braid::transport::shm {

uint64_t RingWriter::Free() const { return capacity_ - kRecordAlign - (head_ - cached_tail_); }

char* RingWriter::Reserve(uint64_t min_payload, uint64_t max_payload, uint64_t* granted) {
  max_payload = std::min(max_payload, max_record_payload());
  min_payload = std::min(min_payload, max_payload);
  // First with the tail we saw last (no access to the consumer's cache line), then, if that is
  // not enough for the whole request, with a fresh one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1 || Free() < RecordBytes(max_payload)) {
      const uint64_t tail = control_->tail.load(std::memory_order_acquire);
      if (attempt == 1 && tail == cached_tail_) break;
      cached_tail_ = tail;
    }
    const uint64_t offset = head_ & (capacity_ - 1);
    const uint64_t contiguous = capacity_ - offset;
    const uint64_t free = Free();
    // Room at the current position (records never wrap). Take what fits here if it reaches the
    // minimum: a message cut in pieces wastes nothing, and a small message (minimum = its size)
    // is never split.
    const uint64_t here = std::min(free, contiguous);
    if (here >= RecordBytes(min_payload)) {
      *granted = std::min(max_payload, here - sizeof(RecordHeader));
      return data_ + offset + sizeof(RecordHeader);
    }
    // Pad to the ring start if that leaves room for at least the minimum.
    if (contiguous <= free && free - contiguous >= RecordBytes(min_payload)) {
      Publish(head_, RecordKind::kPad, 0, 0, 0);  // clears the stamp at position 0 first
      head_ += contiguous;
      *granted = std::min(max_payload, free - contiguous - sizeof(RecordHeader));
      return data_ + sizeof(RecordHeader);
    }
  }
  PublishHead();  // the producer waits for the consumer here: show how far it got
  return nullptr;
}

bool RingWriter::TryWriteLine(const void* payload, uint32_t length, uint64_t tag) {
  if (Free() < kRecordAlign) {
    cached_tail_ = control_->tail.load(std::memory_order_acquire);
    if (Free() < kRecordAlign) return false;
  }
  if (length > 0) std::memcpy(data_ + (head_ & (capacity_ - 1)) + sizeof(RecordHeader), payload, length);
  Commit(RecordKind::kStart, length, tag, length);
  return true;
}

void RingWriter::Publish(uint64_t position, RecordKind kind, uint32_t length, uint64_t tag,
                         uint64_t total) {
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

void RingWriter::Commit(RecordKind kind, uint32_t length, uint64_t tag, uint64_t total) {
  Publish(head_, kind, length, tag, total);
  const uint64_t before = head_;
  head_ += RecordBytes(length);
  // control_->head is informational (nobody reads it to find records), and it shares its cache
  // line with want_doorbell, which the consumer reads after every record it consumes. Storing it
  // per record made that line bounce between the cores twice per message (the producer's store,
  // then the consumer's load), a cache miss on each side of every small message. It is therefore
  // published once per quarter of the ring, and whenever the producer finds the ring full
  // (PublishHead), which is when someone reading a core dump wants to know where it stood.
  // (capacity_ is a power of two: head crossed a quarter boundary iff a bit at or above the
  // quarter's changed.)
  if (((before ^ head_) & ~(capacity_ / 4 - 1)) != 0) PublishHead();
}

void RingWriter::PublishHead() { control_->head.store(head_, std::memory_order_release); }

const RecordHeader* RingReader::Peek() {
  for (;;) {
    auto* record = reinterpret_cast<const RecordHeader*>(data_ + (tail_ & (capacity_ - 1)));
    if (record->stamp.load(std::memory_order_acquire) != ~tail_) return nullptr;
    if (record->kind != RecordKind::kPad) return record;
    Consume(record);
  }
}

void RingReader::Consume(const RecordHeader* record) {
  const uint64_t offset = tail_ & (capacity_ - 1);
  tail_ += record->kind == RecordKind::kPad ? capacity_ - offset : RecordBytes(record->length);
  control_->tail.store(tail_, std::memory_order_release);
}

}  // namespace braid::transport::shm
