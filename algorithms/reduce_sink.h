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

#include <cstddef>

#include "core/base/datatype.h"
#include "transport/connection.h"

namespace braid::algorithms {

class ReduceSink final : public transport::LandingSink {
 public:
  ReduceSink() = default;
  ReduceSink(void* dst, const void* own, DataType type, ReduceOp op, bool message_first) {
    Reset(dst, own, type, op, message_first);
  }

  // Targets the next message (see the file comment for the arguments).
  void Reset(void* dst, const void* own, DataType type, ReduceOp op, bool message_first);

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

}  // namespace braid::algorithms
