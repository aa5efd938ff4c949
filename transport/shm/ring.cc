// The record ring (see ring.h for the format and why it is laid out so).
#include "transport/shm/ring.h"

#include <algorithm>
#include <cstring>

namespace braid::transport::shm {

void RingWriter::ReturnToHotWindow() {
  const uint64_t offset = head_ & (capacity_ - 1);
  // One load of the consumer's tail per record while past the window: only a ring larger than
  // its window gets here, and only while its consumer is behind.
  cached_tail_ = control_->tail.load(std::memory_order_acquire);
  if (cached_tail_ != head_) return;  // not empty: the consumer is behind, use the whole ring
  Publish(head_, RecordKind::kPad, 0, 0, 0);  // clears the stamp at position 0 first
  head_ += capacity_ - offset;
}

char* RingWriter::Reserve(uint64_t min_payload, uint64_t max_payload, uint64_t* granted) {
  if ((head_ & (capacity_ - 1)) >= hot_bytes_) ReturnToHotWindow();
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
