// ReduceSink: reduces a message into place as it lands, straight out of the transport's memory.
//
// Why: a transport moves bytes only (transport/connection.h). An algorithm that combines a
// received message with its own data could receive it into scratch and reduce afterwards, but
// that reads and writes every byte once more and cannot start before the whole message is in.
// Over a connection that lands in place (Connection::LandsInPlace, shared memory) it posts
// Connection::PostRecvInto with this sink instead: each piece is reduced where it landed (a ring
// slot, the peer's buffer) while the next piece is still on its way, as NCCL's recvReduce*
// primitives read from a peer's FIFO (against scratch-then-reduce, 2 ranks, 1 MiB allreduce:
// 8.4-10.9 -> 14.4-15.3 GB/s, commit ec2e08b). The reduction itself stays in this
// layer (kernels/cpu/reduce.h now; a device sink can enqueue kernels later).
//
// What it computes, for a message of `count` elements landing at element offsets 0..count-1:
//   dst[i] = own[i] op message[i]     (message[i] op own[i] when message_first)
// with kernels::ReduceInto's semantics (kAvg reduces as kSum; the caller divides once). Callers
// fix the operand order so every rank rounds alike (max/min of signed zeros depend on it too).
// `own` may be exactly `dst` (in place), not partly overlap it. The message must be a whole
// number of elements; a piece that ends inside an element (a transport may cut pieces anywhere)
// is carried over and that element is reduced once the next piece completes it.
//
// Ownership and threads: the transport calls Land() from whichever thread drives the
// connection, one piece at a time, and holds the sink (a shared_ptr) until it calls it no more;
// dst and own must stay valid until the receive's request completes, or, after a failure, until
// the communicator has broken its links (as any receive buffer). Hand each pending receive a sink
// of its own; Reset() prepares one for its next receive once the previous receive completed.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>

#include "core/base/datatype.h"
#include "transport/connection.h"

namespace braid::algorithms {

class ReduceSink final : public transport::LandingSink {
 public:
  ReduceSink() = default;
  ReduceSink(void* dst, const void* own, DataType type, ReduceOp op, bool message_first) {
    Reset(dst, own, type, op, message_first);
  }

  // Targets the next message (see the file comment for the arguments). Inline: it runs once per
  // reducing receive.
  void Reset(void* dst, const void* own, DataType type, ReduceOp op, bool message_first) {
    dst_ = static_cast<char*>(dst);
    own_ = static_cast<const char*>(own);
    type_ = type;
    op_ = op;
    message_first_ = message_first;
    const size_t elem = DataTypeSize(type);
    elem_ = elem > 0 ? elem : 1;
    carry_bytes_ = 0;
  }

  // transport::LandingSink: reduces the whole elements of [offset, offset + length), carrying a
  // split element over to the next piece.
  void Land(size_t offset, const void* data, size_t length) override;

 private:
  static constexpr size_t kMaxElementBytes = 8;  // the widest DataType (int64, uint64, float64)

  // dst[offset..] = own op message for `count` elements from byte `offset`.
  void Reduce(size_t offset, const void* message, size_t count) const;

  char* dst_ = nullptr;
  const char* own_ = nullptr;
  DataType type_ = DataType::kFloat32;
  ReduceOp op_ = ReduceOp::kSum;
  bool message_first_ = false;
  size_t elem_ = 4;
  alignas(kMaxElementBytes) unsigned char carry_[kMaxElementBytes] = {};
  size_t carry_bytes_ = 0;  // bytes of a split element seen so far
};

// N sinks in one block shared with the connections that call them (hand each receive an aliasing
// shared_ptr to one of them), from a per-thread cache. Why: a block allocated per collective
// cost a malloc, a free and a control block (~140 instructions) on every reducing collective
// over shared memory, 0.3% of a 2-rank 64 KiB reduce-scatter. The cached block is handed out
// again only once nobody else holds it: neither an earlier collective nor a connection that may
// still call one of its sinks (a receive left pending by a failure keeps it, and the next caller
// gets a fresh block). Call it from the thread that will Reset the sinks.
template <size_t N>
std::shared_ptr<std::array<ReduceSink, N>> TakeReduceSinks() {
  thread_local std::shared_ptr<std::array<ReduceSink, N>> cached;
  if (cached != nullptr && cached.use_count() == 1) {
    // The last holder's calls into the sinks happened before it let go (its release of the
    // count, read above); this fence makes them happen before the caller's Reset.
    std::atomic_thread_fence(std::memory_order_acquire);
    return cached;
  }
  cached = std::make_shared<std::array<ReduceSink, N>>();
  return cached;
}

}  // namespace braid::algorithms
