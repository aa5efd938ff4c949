// Primitives: the moves ring and chain algorithms are written in.
//
// (Algorithms that talk to sets of peers — trees, binomial trees, direct and pairwise exchanges,
// the barrier — are written in the same moves generalised to sets of receive and send peers,
// fan_primitives.h; recursive doubling and halving in its PairExchange.)
//
// A rank on a ring or a chain talks to two neighbours over one channel: it receives from `prev`
// and sends to `next`. Every algorithm of the ring family is a sequence of the moves NCCL's
// device code is written in (src/device/primitives.h), so each reads like its pseudocode:
//
//   Send(src)                      next <- src
//   Recv(dst)                      dst  <- prev
//   RecvCopySend(dst)              dst  <- prev;       next <- dst
//   RecvReduceSend(own)                                 next <- prev op own   (a partial result)
//   RecvReduceCopySend(dst, own)   dst  <- prev op own; next <- dst           (the complete one)
//   RecvReduce(dst, own)           dst  <- prev op own                        (the complete one)
//
// Each move names a Span of elements of the buffers it is given. Algorithms cut their buffers
// into chunk_elems() slices with Slice() and issue the moves slice by slice (slice-major): slice
// s goes through every step of the algorithm before slice s+1 starts, so a rank never sends more
// than about one message ahead of what it received, which is what keeps the bounded scratch
// below free of deadlock.
//
// Message streams. Every move that receives takes the next message number from prev, every move
// that sends the next number to next; with the collective's sequence number that makes the tag
// (MessageTag), so ranks that disagree about the schedule fail on a tag mismatch instead of
// mixing data. Both ends of a link compute the same spans, so moves of zero elements are dropped
// on both sides alike and send nothing.
//
// Pipelining lives here, not in the algorithms. A move is not carried out when it is called: it
// joins a queue and its receive is posted at once, up to kWindow receives ahead of the move being
// carried out, so data keeps landing while this rank reduces or forwards earlier slices and the
// transport always has a buffer to read into. Moves run strictly in call order (sends must leave
// in order on a FIFO connection, and a send may forward what an earlier move received), each as
// soon as its receive has completed. The calling thread blocks only when the window is full (on
// the oldest move's receive), when a scratch slot's send is still in flight, and in Finish().
// Sends are reaped as they complete; every wait is bounded by ctx.deadline.
//
// Where data lands. Recv and RecvCopySend receive straight into the caller's buffer, so the
// transport may write dst as soon as the move is *called*, before earlier queued moves have run:
// the caller must not need dst's old contents in any earlier move (each algorithm says why that
// holds for it). The reducing moves receive into scratch slots and write dst only when they run;
// over a connection that lands messages in place (Connection::LandsInPlace, shared memory) they
// instead post a PostRecvInto whose ReduceSink (algorithms/reduce_sink.h) combines each piece
// with `own` where it landed, into dst (RecvReduce, RecvReduceCopySend: one pass less, and the
// reduction overlaps the transfer) or into the slot (RecvReduceSend). Then dst is written early
// like Recv's, and `own` is read early: the same rule holds for both, and every algorithm here
// reads only its input (never written) or a region no earlier move touches as `own`.
// RecvReduceCopySend and RecvReduce produce complete reductions; for ReduceOp::kAvg they divide
// that result by ctx.size right there (kernels::DivideInPlace), so every element is divided once,
// before anyone forwards it.
//
// Errors. The first failure is kept and every later move becomes a no-op, so algorithms issue
// moves without checking each one and return Finish(). The status names the rank, the collective
// and its sequence number, the algorithm, the message number and the peer. After a failure,
// requests still in flight are left to the communicator, which breaks its connections.
//
// Thread safety: one Primitives belongs to one collective on one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "algorithms/reduce_sink.h"
#include "core/base/status.h"
#include "transport/connection.h"

namespace braid::algorithms {

// A first-in first-out queue that keeps its first N (a power of two) entries inside the object
// and moves to the heap only beyond that.
//
// Why not std::deque: libstdc++'s deque allocates its map and a first node when it is
// constructed, and a Primitives is built for every collective call, so its two queues cost four
// heap operations even on an 8-byte broadcast. The queues hold a few entries in practice (at most
// kWindow moves with a receive, and the sends between them), so the heap is only a safety net
// for schedules that queue more; entries keep their order across the move to the heap. Slots
// are raw storage, so an empty queue costs nothing to build or destroy.
template <typename T, size_t N>
class InlineFifo {
  static_assert(N > 0 && (N & (N - 1)) == 0, "N must be a power of two");

 public:
  InlineFifo() = default;
  InlineFifo(const InlineFifo&) = delete;
  InlineFifo& operator=(const InlineFifo&) = delete;
  ~InlineFifo() {
    while (size_ > 0) pop_front();
    if (data_ != Inline()) ::operator delete(data_);
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return data_[head_]; }
  void push_back(T value) {
    if (size_ == capacity_) Grow();
    new (&data_[(head_ + size_) & (capacity_ - 1)]) T(std::move(value));
    ++size_;
  }
  void pop_front() {
    data_[head_].~T();
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
  }

 private:
  T* Inline() { return reinterpret_cast<T*>(inline_); }
  void Grow() {
    const size_t capacity = 2 * capacity_;
    T* grown = static_cast<T*>(::operator new(capacity * sizeof(T)));
    for (size_t i = 0; i < size_; ++i) {
      T& entry = data_[(head_ + i) & (capacity_ - 1)];
      new (&grown[i]) T(std::move(entry));
      entry.~T();
    }
    if (data_ != Inline()) ::operator delete(data_);
    data_ = grown;
    capacity_ = capacity;
    head_ = 0;
  }

  static_assert(alignof(T) <= alignof(std::max_align_t), "over-aligned entries");
  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = Inline();
  size_t capacity_ = N;
  size_t head_ = 0;  // index of the front entry in data_
  size_t size_ = 0;
};

// Elements [offset, offset + count) of a buffer.
struct Span {
  size_t offset = 0;
  size_t count = 0;
};

class Primitives {
 public:
  // Receives posted ahead of the move being carried out.
  static constexpr size_t kWindow = 4;
  // Scratch slots of chunk_elems() elements for the reducing moves. A RecvReduceSend keeps its
  // slot until its send completes; with twice the window, the slot a new receive needs was last
  // used kSlots receives ago, whose send the next rank has already posted a receive for (sends
  // lead receives by at most one message under slice-major order), so waiting for it cannot close
  // a cycle of waits around the ring.
  static constexpr size_t kSlots = 2 * kWindow;

  // `args` gives the element type and reduction (and the collective, for error messages);
  // `algorithm` is the name errors quote ("ring").
  Primitives(const CollectiveContext& ctx, const CollectiveArgs& args, const char* algorithm);
  Primitives(const Primitives&) = delete;
  Primitives& operator=(const Primitives&) = delete;

  // Opens the channel: receive from rank `prev`, send to rank `next`; -1 for none (the ends of a
  // chain). Connects on first use, within ctx.deadline.
  Status Connect(int prev, int next);

  // Elements per message: ctx.chunk_bytes in whole elements, at least one.
  size_t chunk_elems() const { return chunk_elems_; }
  // How many slices a range of `count` elements is cut into (0 for an empty range).
  size_t SliceCount(size_t count) const { return (count + chunk_elems_ - 1) / chunk_elems_; }
  // Slice `index` of a range of `count` elements; empty once past the end, so ranges of unequal
  // length can be walked with one slice index.
  Span Slice(size_t count, size_t index) const;

  // The moves (see the table above). Pointers are buffer bases; spans index them in elements.
  // Every pointer must stay valid, and every source unchanged, until Finish() returns.
  void Send(const void* src, Span span);
  void Recv(void* dst, Span span);
  void RecvCopySend(void* dst, Span span);
  void RecvReduceSend(const void* own, Span span);
  void RecvReduceCopySend(void* dst, const void* own, Span span);
  void RecvReduce(void* dst, const void* own, Span span);

  // Carries out every queued move and waits for every send. Returns the first failure, if any.
  Status Finish();
  // False once a move failed (algorithms may stop issuing moves early).
  bool ok() const { return status_.ok(); }

 private:
  enum class Move : uint8_t {
    kSend,
    kRecv,
    kRecvCopySend,
    kRecvReduceSend,
    kRecvReduceCopySend,
    kRecvReduce,
  };
  struct Op {
    Move move;
    char* dst;        // result (Recv*, *CopySend, RecvReduce)
    const char* src;  // Send: the data; reducing moves: this rank's contribution
    size_t count;
    int slot;          // scratch slot of a reducing move's receive, else -1
    uint64_t message;  // number of its receive
    transport::RequestPtr recv;
    bool reduced = false;  // reduced as it lands (PostRecvInto with a ReduceSink)
  };
  struct PendingSend {
    transport::RequestPtr request;
    uint64_t message;
  };

  void Issue(Op op);
  Status Run(Op& op);
  Status RunFront();
  Status RunReady();
  Status PostSend(const char* data, size_t count, int slot);
  Status ReapSends();
  Result<int> AcquireSlot();
  void Complete(char* dst, size_t count) const;
  Status Fail(const Status& status, bool receiving, uint64_t message) const;
  std::string Describe() const;

  const CollectiveContext& ctx_;
  const CollectiveArgs args_;
  const char* const algorithm_;
  const size_t elem_;
  const size_t chunk_elems_;

  int prev_rank_ = -1;
  int next_rank_ = -1;
  transport::Connection* prev_ = nullptr;
  transport::Connection* next_ = nullptr;

  Status status_;
  InlineFifo<Op, 8> queue_;        // moves called but not yet carried out, in call order
  size_t pending_recvs_ = 0;       // moves in queue_ with a receive
  uint64_t recv_messages_ = 0;     // receives posted so far (the next message number from prev)
  uint64_t send_messages_ = 0;     // sends posted so far (the next message number to next)
  InlineFifo<PendingSend, 8> sends_;  // posted sends not yet seen complete, oldest first

  char* slots_ = nullptr;  // kSlots * chunk_elems_ elements of ctx.scratch, taken on first use
  PendingSend slot_sends_[kSlots];
  size_t next_slot_ = 0;

  // The sinks of in-place reducing receives, taken on first use (TakeReduceSinks: a per-thread
  // block, reused once nobody holds it): message m's is m % kWindow, free again by then (at most
  // kWindow - 1 receives are pending when one is posted, and moves run in message order). Shared
  // with the connection, which holds a sink until it calls it no more: a failed collective may
  // leave receives pending after this object is gone.
  std::shared_ptr<std::array<ReduceSink, kWindow>> sinks_;
};

}  // namespace braid::algorithms
