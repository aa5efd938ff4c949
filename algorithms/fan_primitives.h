// Fan primitives: the moves every algorithm that talks to more than two neighbours is written in.
// The ring and chain family keeps its two-neighbour channel (primitives.h); this is its
// generalisation to sets of peers, NCCL's FanAsymmetric idea (src/device/prims_simple.h: a
// primitive with up to MaxRecv receive peers and MaxSend send peers), on braid's host
// connections, in three shapes that share tags, deadlines and error text:
//   FanPrimitives  queued, pipelined moves over sets of peers, chunk by chunk (the double binary
//                  tree, the binomial broadcast and reduce);
//   FanRound       one round of sends and receives posted at once and waited for as a set (the
//                  direct allreduce, gather and scatter, the binomial gather and scatter per
//                  slice, pairwise all-to-all, the dissemination barrier);
//   PairExchange   a pairwise exchange carried out at once (recursive doubling and halving).
// Each is the lightest that carries its algorithms: the queue's bookkeeping costs as much as a
// small direct round or an 8-byte exchange does in all (docs/PERFORMANCE.md), so those do without.
//
// FanPrimitives:
//
// A move names the peers it receives from (`from`) and the peers it sends to (`to`), as a PeerSet:
//
//   Send(to, src)                          every t in to  <- src
//   Recv(from, dst)                        dst <- from                       (one peer)
//   RecvCopySend(from, dst, to)            dst <- from;           to <- dst
//   RecvReduce(from, dst, own)             dst <- own op from[0] op from[1] ...   (complete)
//   RecvReduceSend(from, dst, own, to)     dst <- own op from...; to <- dst (a partial result)
//   Signal(to) / Await(from)               a message of no data to every t in to / from `from`
//
// Fan-in (the reducing moves) combines the contributions left to right in the order `from` lists
// them; this rank's `own` comes first, unless `from` lists this rank itself, which then stands for
// `own` at that place (an order by rank, as the direct allreduce and recursive doubling use). Every rank that must compute the same bits therefore sees the same operands in the same
// order, whatever order the messages arrive in: the operand order is part of the algorithm, and
// the primitives keep it exactly (kernels/cpu/reduce.h, one ReduceInto per contribution). A
// complete reduction divides for ReduceOp::kAvg right there, once, before it is sent or returned
// (kernels::DivideInPlace by ctx.size). Fan-out (the sending moves) posts one send per peer of
// `to`, in its order. Pairwise exchange is Send(to, ...) then Recv(from, ...): the send leaves
// before the receive is waited for, so partners never wait on each other. Algorithms whose every
// step waits for its partner anyway (recursive doubling and halving) use PairExchange, below:
// the same exchange carried out at once, without the queue.
//
// Spans: each move names a Span of elements of the buffers it is given, in the collective's data
// type. The reducing moves receive into scratch slots of slot_elems() elements, so their spans
// are at most that long; the others take spans of any length (the direct and binomial gathers
// send whole packed subtrees). Algorithms cut large buffers into chunk-sized slices themselves
// (ctx.chunk_bytes) and issue the moves slice by slice, as the ring does, so the levels of a tree
// work at the same time.
//
// Message streams and tags. Every link keeps two counters, messages sent to the peer and messages
// received from it; a send takes the next number of its link, a receive the next number of its
// link, and MessageTag(ctx.sequence, number) is the tag. Both ends of a link post its messages in
// the same order (a connection requires it: receives match sends in order), so both count alike,
// and ranks that disagree about the schedule fail on a tag or size mismatch instead of mixing
// data. Moves of zero elements are dropped on both sides alike and send nothing.
//
// Pipelining. A move is queued when it is called and its receives are posted at once, up to
// `window` receives ahead of the move being carried out, so data lands while this rank reduces or
// forwards earlier slices. Moves run strictly in call order, each once its receives completed:
// sends leave a FIFO connection in the order the peer posts its receives, and a send may forward
// what an earlier move received. The calling thread blocks only when the window is full (on the
// oldest move's receive), before writing memory a send still reads (below), and in Flush() /
// Finish(). Sends are reaped as they complete; every wait is bounded by ctx.deadline.
//
// Where data lands. Recv and RecvCopySend receive straight into the caller's buffer, so the
// transport may write dst as soon as the move is *called*, before earlier queued moves have run:
// the caller must not need dst's old contents in any earlier move (each algorithm says why that
// holds for it). Received contributions of the reducing moves land in scratch slots, `window` of
// them (ctx.scratch, taken on first use, so an algorithm that takes ctx.scratch itself uses no
// reducing move); RecvReduceSend with no dst accumulates in one of `acc_slots` slots of its own,
// held until its sends complete. A reduction or a Copy never writes memory that a posted send is
// still reading (in place, a buffer being sent is also being reduced into; an accumulator slot is
// reused): it first waits for those sends.
//
// Errors. The first failure is kept and every later move becomes a no-op, so algorithms issue
// moves without checking each one and return Finish(). The status names the rank, the collective
// and its sequence number, the algorithm, what this rank was doing, the message number on that
// link and the peer (operation_context.h):
//   rank 2: reduce #17 (1021 x float, sum, root 0, binomial): receiving message 3 from rank 1
// After a failure, requests still in flight are left to the communicator, which breaks its
// connections.
//
// Thread safety: one FanPrimitives belongs to one collective on one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "algorithms/primitives.h"  // Span, InlineFifo
#include "algorithms/reduce_sink.h"
#include "core/base/status.h"
#include "kernels/cpu/reduce.h"
#include "transport/connection.h"

namespace braid::algorithms {

// The peers of one side of a move: a list of ranks owned by the caller, or one rank held inside
// (so `prims.Send(parent, ...)` needs no array; -1 is nobody, as trees say "no parent").
class PeerSet {
 public:
  PeerSet() = default;
  PeerSet(int rank) : one_(rank), count_(rank >= 0 ? 1 : 0) {}  // NOLINT: a rank is a set of one
  PeerSet(const int* ranks, size_t count) : ranks_(ranks), count_(count) {}
  PeerSet(const std::vector<int>& ranks) : ranks_(ranks.data()), count_(ranks.size()) {}  // NOLINT

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  int operator[](size_t i) const { return ranks_ != nullptr ? ranks_[i] : one_; }

 private:
  const int* ranks_ = nullptr;  // the caller's list; null: the single rank one_
  int one_ = -1;
  size_t count_ = 0;
};

class FanPrimitives {
 public:
  struct Options {
    // Receives posted ahead of the move being carried out (and scratch slots for them).
    size_t window = 4;
    // Elements per scratch slot; 0 means ctx.chunk_bytes in whole elements (at least one).
    size_t slot_elems = 0;
    // Accumulator slots for RecvReduceSend with no dst, each held until its sends complete.
    size_t acc_slots = 0;
    // One more slot for an in-place own contribution that a fan-in reads after its first
    // combination overwrote dst (the direct allreduce's ranks >= 2).
    bool own_slot = false;
  };

  // `args` gives the element type and reduction (and the collective, for error messages);
  // `algorithm` is the name errors quote ("binomial").
  FanPrimitives(const CollectiveContext& ctx, const CollectiveArgs& args, const char* algorithm,
                Options options);
  FanPrimitives(const CollectiveContext& ctx, const CollectiveArgs& args, const char* algorithm)
      : FanPrimitives(ctx, args, algorithm, Options()) {}
  FanPrimitives(const FanPrimitives&) = delete;
  FanPrimitives& operator=(const FanPrimitives&) = delete;

  // Makes the links to `peers` now, in that order, within ctx.deadline, instead of at their first
  // message. Algorithms whose ranks wait on each other before every link is used call it first:
  // a link's accepting side waits for the dialing side to ask, so a rank must not block on a
  // peer that is itself blocked before dialing it.
  Status Connect(PeerSet peers);

  // Elements per scratch slot: the longest span a reducing move takes.
  size_t slot_elems() const { return slot_elems_; }
  // Elements per pipelined slice: ctx.chunk_bytes in whole elements, at least one.
  size_t chunk_elems() const { return chunk_elems_; }
  // How many chunk_elems() slices a range of `count` elements is cut into (0 for an empty range).
  size_t SliceCount(size_t count) const { return (count + chunk_elems_ - 1) / chunk_elems_; }
  // Slice `index` of a range of `count` elements; empty once past the end.
  Span Slice(size_t count, size_t index) const {
    const size_t begin = std::min(count, index * chunk_elems_);
    return Span{begin, std::min(count, begin + chunk_elems_) - begin};
  }

  // The moves (see the table above). Pointers are buffer bases; spans index them in elements.
  // Every pointer (and every PeerSet `to` list) must stay valid, and every source unchanged,
  // until the move has run (Flush() or Finish() returned). `from` is read during the call.
  void Send(PeerSet to, const void* src, Span span);
  void Recv(int from, void* dst, Span span);
  void RecvCopySend(int from, void* dst, PeerSet to, Span span);
  void RecvReduce(PeerSet from, void* dst, const void* own, Span span);
  // dst == nullptr: the partial is accumulated in an accumulator slot (Options::acc_slots).
  void RecvReduceSend(PeerSet from, void* dst, const void* own, PeerSet to, Span span);
  // A message of no data: Signal tells every peer of `to` that this rank got here, Await waits
  // for `from`'s signal (the barrier's moves; data moves of zero elements send nothing).
  void Signal(PeerSet to);
  void Await(int from);

  // Carries out every queued move and waits for every send; more moves may follow (an algorithm
  // that reuses a staging buffer for its next slice flushes in between). Returns the first
  // failure, if any.
  Status Flush();
  // Flush(), for the end of the collective.
  Status Finish() { return Flush(); }
  // False once a move failed (algorithms may stop issuing moves early).
  bool ok() const { return status_.ok(); }

 private:
  // What an operation does once its receive (if any) completed.
  enum class Action : uint8_t {
    kNone,      // a plain receive (into dst) or a send of src
    kLand,      // a fan-in's first contribution when it is a message: it waits in its slot
    kReduce,    // dst = lhs op rhs (operands below)
    kCopy,      // dst = src, locally
  };
  // Operands of a reduction.
  enum class Operand : uint8_t { kOwn, kAcc, kMessage, kLanded };
  struct Op {
    Action action;
    Operand lhs, rhs;
    bool complete;   // a complete reduction: kAvg divides here
    bool consumes;   // uses the message a kLand op left in its slot (frees its window place)
    int from;        // peer of the receive, -1 for none
    char* dst;
    const char* src;  // a send's data, a reduction's own contribution, a copy's source
    size_t count;
    char* slot;       // where the message lands when it is not dst
    char* landed;     // kLanded operand
    uint64_t message;  // the receive's number on its link
    transport::RequestPtr recv;
    PeerSet to;  // sent dst (or src for a plain send) once the action ran
  };
  struct PendingSend {
    transport::RequestPtr request;
    int peer;
    uint64_t message;
    const char* data;
    size_t bytes;
  };
  // Per peer: its connection (null until first used) and both message counters.
  struct Link {  // trivial: set up on first use (LinkTo)
    transport::Connection* connection;
    uint64_t sent;
    uint64_t received;
  };

  void FanIn(PeerSet from, void* dst, const void* own, PeerSet to, Span span, bool complete,
             bool accumulate);
  void Issue(Op& op);  // moves op into the queue
  // dst <- src locally, in move order (FanIn's copy of an in-place own contribution).
  void Copy(void* dst, const void* src, Span span);
  Status Run(Op& op);
  Status RunFront();
  Status RunReady();
  Status SendFrom(const char* data, size_t count, PeerSet to);

  Status ReapSends();
  Status AwaitSendsReading(const char* begin, size_t bytes);
  // The link to `peer`, connected on first use; null with status_ set on failure. Inline: every
  // message looks its link up.
  Link* LinkTo(int peer) {
    if (heap_links_ == nullptr && (inline_used_ >> peer & 1) != 0 &&
        inline_links_[peer].connection != nullptr) {
      return &inline_links_[peer];
    }
    return MakeLink(peer);
  }
  Link* MakeLink(int peer);
  char* Slots();
  Status Fail(const Status& status, const char* doing, uint64_t message, int peer) const;
  std::string Describe() const;

  const CollectiveContext& ctx_;
  const CollectiveArgs args_;
  const char* const algorithm_;
  const size_t elem_;
  const size_t chunk_elems_;
  const size_t slot_elems_;
  const size_t window_;
  const size_t acc_slots_;
  const bool own_slot_;

  Status status_;
  // Links by rank: inline up to kInlineLinks ranks, so small jobs allocate nothing per call, and
  // set up on first use (inline_used_ bit r): a small collective touches one or two of them, and
  // clearing all of them was a measurable part of a 2-rank 8-byte allreduce.
  static constexpr int kInlineLinks = 16;
  Link inline_links_[kInlineLinks];  // left uninitialised: Link is trivial
  uint32_t inline_used_ = 0;
  std::unique_ptr<Link[]> heap_links_;  // ctx.size > kInlineLinks: all of them, initialised

  InlineFifo<Op, 16> queue_;          // moves called but not yet carried out, in call order
  size_t pending_recvs_ = 0;          // receives posted whose slot or window place is held
  InlineFifo<PendingSend, 16> sends_;  // posted sends not yet seen complete, oldest first

  char* slots_ = nullptr;  // window_ receive slots, acc_slots_ accumulators, one for own
  size_t next_slot_ = 0;   // receive slots, round robin
  size_t next_acc_ = 0;    // accumulator slots, round robin
  bool running_ = true;  // Issue runs ready moves (false while a fan-in posts its receives)
  char token_ = 0;  // what Signal sends and Await receives into: no byte moves, but a valid address
  char* last_landed_ = nullptr;  // slot of the latest kLand receive, for the op that reads it
};

// Pairwise exchanges carried out at once: the steps of recursive doubling and halving, where a
// rank waits for its partner at every step anyway, so there is nothing to queue or pipeline. The
// same contract as FanPrimitives (spans of the collective's elements, the first failure kept with
// the operation context, the message number and the peer, every wait bounded by ctx.deadline),
// without its queue and per-link bookkeeping: a small allreduce's whole step is one exchange,
// and FanPrimitives' set-up and bookkeeping cost as much as the exchange itself (2-rank 8-byte
// allreduce, callgrind: ~370 more instructions per call than the hand-written steps; a
// per-link message count here still cost ~100).
//
//   Exchange(peer, m, src, dst)            peer <- src; dst <- peer
//   ExchangeReduce(peer, m, src, dst, own) peer <- src; dst <- own op peer (peer op own when
//                                          peer_first: the lower rank's data first, so both
//                                          partners round alike); `complete` divides kAvg
//
// Both return once both halves completed; a half of zero elements is skipped. `m` numbers the
// exchange, the same on both partners (the algorithm's step), and both halves carry it as
// MessageTag(sequence, m). An exchange is one Connection::SendRecv: on shm a small one is a line
// into the ring and a spin, no requests. ExchangeReduce reduces the message as it lands
// (ReduceSink over Connection::PostRecvInto) where Options::sink is set, the link lands in
// place and the send does not read dst (rhd's halving: disjoint halves); otherwise it lands in a
// scratch slot of slot_elems and is reduced after (rd, whose send reads the buffer the reduction
// writes).
//
// Thread safety: one PairExchange belongs to one collective on one thread.
class PairExchange {
 public:
  struct Options {
    size_t slot_elems = 0;  // the longest message that lands in scratch
    // Where set, ExchangeReduce reduces as the message lands, with this sink (made on first
    // use; the connection keeps it while it may call it, so a failed step can leave it in use
    // after the collective returned). The caller holds it, so that recursive doubling, which
    // never reduces as it lands, pays nothing for it.
    std::shared_ptr<ReduceSink>* sink = nullptr;
  };
  PairExchange(const CollectiveContext& ctx, const CollectiveArgs& args, const char* algorithm,
               Options options)
      : ctx_(ctx),
        args_(args),
        algorithm_(algorithm),
        elem_(DataTypeSize(args.type)),
        slot_elems_(options.slot_elems),
        sink_(options.sink) {}
  PairExchange(const PairExchange&) = delete;
  PairExchange& operator=(const PairExchange&) = delete;

  // Forced inline, as the hand-written steps were: at 2 ranks and 8 bytes a call is one exchange,
  // and GCC kept ExchangeReduce out of line, where passing its nine arguments and moving its
  // status cost ~90 instructions per call (callgrind).
  [[gnu::always_inline]] void Exchange(int peer, uint64_t message, const void* src, Span send,
                                       void* dst, Span recv) {
    if (!status_.ok() || (send.count == 0 && recv.count == 0)) return;
    status_ = ExchangeBytes(peer, message, static_cast<const char*>(src) + send.offset * elem_,
                            send.count * elem_, static_cast<char*>(dst) + recv.offset * elem_,
                            recv.count * elem_);
  }
  [[gnu::always_inline]] void ExchangeReduce(int peer, uint64_t message, const void* src,
                                             Span send, void* dst, const void* own, Span recv,
                                             bool peer_first, bool complete) {
    if (!status_.ok()) return;
    if (recv.count == 0) return Exchange(peer, message, src, send, nullptr, recv);
    const char* out = static_cast<const char*>(src) + send.offset * elem_;
    const size_t out_bytes = send.count * elem_;
    char* target = static_cast<char*>(dst) + recv.offset * elem_;
    const char* mine = static_cast<const char*>(own) + recv.offset * elem_;
    const size_t in_bytes = recv.count * elem_;
    if (sink_ != nullptr &&
        !(out_bytes > 0 && out < target + in_bytes && target < out + out_bytes)) {
      status_ = ExchangeLanding(peer, message, out, out_bytes, target, mine, in_bytes, peer_first);
    } else if (recv.count > slot_elems_) {
      status_ = SlotTooSmall(recv.count);
    } else {
      if (slot_ == nullptr) slot_ = static_cast<char*>(ctx_.scratch(slot_elems_ * elem_));
      status_ = ExchangeBytes(peer, message, out, out_bytes, slot_, in_bytes);
      if (status_.ok()) {
        kernels::ReduceInto(args_.type, args_.op, target, peer_first ? slot_ : mine,
                            peer_first ? mine : slot_, recv.count);
      }
    }
    if (complete && args_.op == ReduceOp::kAvg && status_.ok()) {
      kernels::DivideInPlace(args_.type, target, recv.count, ctx_.size);
    }
  }
  // The first failure, if any (every exchange has completed when it returns).
  const Status& Finish() const { return status_; }
  bool ok() const { return status_.ok(); }

 private:
  Status ExchangeBytes(int peer, uint64_t message, const char* send, size_t send_bytes,
                       char* recv, size_t recv_bytes) {
    BRAID_ASSIGN_OR_RETURN(transport::Connection * connection, ctx_.connection(peer));
    transport::Connection::Half failed = transport::Connection::Half::kReceive;
    Status status = connection->SendRecv(send, send_bytes, recv, recv_bytes,
                                         MessageTag(ctx_.sequence, message), ctx_.deadline,
                                         &failed);
    if (status.ok()) return status;
    return Failed(status, failed == transport::Connection::Half::kSend, message, peer);
  }
  // ExchangeReduce where the link lands in place (else it falls back to a slot, as above).
  Status ExchangeLanding(int peer, uint64_t message, const char* send, size_t send_bytes,
                         char* target, const char* own, size_t recv_bytes, bool peer_first);
  [[gnu::cold]] Status Failed(const Status& status, bool sending, uint64_t message,
                              int peer) const;
  [[gnu::cold]] Status SlotTooSmall(size_t count) const;

  const CollectiveContext& ctx_;
  const CollectiveArgs& args_;
  const char* const algorithm_;
  const size_t elem_;
  const size_t slot_elems_;
  std::shared_ptr<ReduceSink>* const sink_;  // Options::sink
  Status status_;
  char* slot_ = nullptr;  // slot_elems_ elements of ctx.scratch, taken on first use
};

// One round of a fan posted at once: sends and receives, each to or from one peer, all in flight
// together and waited for as a set. The direct algorithms (direct allreduce, gather, scatter),
// the binomial gather and scatter's per-slice fans, pairwise all-to-all's sliding rounds and the
// dissemination barrier are such rounds: nothing in them waits on an earlier message of the same
// round, so they need no queue, and FanPrimitives' per-move bookkeeping doubled their cost at
// small sizes (callgrind, 4 ranks, rank 0 per call: direct gather of 8 bytes 1040 -> 2094
// instructions, direct allreduce 2107 -> 4219, pairwise all-to-all 2246 -> 4274).
//
//   Send(peer, m, src, span)   post: peer <- src
//   Recv(peer, m, dst, span)   post: dst <- peer
//   WaitReceives()             every posted receive, in posting order
//   WaitOldest()               the oldest receive, then the oldest send (a sliding window)
//   Wait()                     every receive, then every send
//
// `m` numbers the message, the same on both ends (the algorithm's own numbering; both ends post a
// pair's messages in the same order). Receives are waited for before sends: a send completes when
// the peer has taken it (shm copies a large one straight from the sender's buffer), which the
// peer does while it waits on its own receives, so ranks that all waited on their sends first
// would wait on each other forever. Every wait is bounded by ctx.deadline; the first failure is
// kept (later posts are skipped, later waits return it) with the operation context, the message
// and the peer, as FanPrimitives words it.
//
// Thread safety: one FanRound belongs to one collective on one thread.
class FanRound {
 public:
  FanRound(const CollectiveContext& ctx, const CollectiveArgs& args, const char* algorithm)
      : ctx_(ctx), args_(args), algorithm_(algorithm), elem_(DataTypeSize(args.type)) {}
  FanRound(const FanRound&) = delete;
  FanRound& operator=(const FanRound&) = delete;

  void Send(int peer, uint64_t message, const void* src, Span span) {
    transport::Connection* connection = ConnectionTo(peer);
    if (connection == nullptr) return;
    sends_.push_back(Posted{connection->PostSend(static_cast<const char*>(src) + span.offset * elem_,
                                                 span.count * elem_,
                                                 MessageTag(ctx_.sequence, message)),
                            peer, message});
  }
  void Recv(int peer, uint64_t message, void* dst, Span span) {
    transport::Connection* connection = ConnectionTo(peer);
    if (connection == nullptr) return;
    recvs_.push_back(Posted{connection->PostRecv(static_cast<char*>(dst) + span.offset * elem_,
                                                 span.count * elem_,
                                                 MessageTag(ctx_.sequence, message)),
                            peer, message});
  }
  // A receive handed to `sink` piece by piece as it lands (Connection::PostRecvInto): a reduction
  // into place with a ReduceSink, as the two-shot allreduce's reduce-scatter takes its pieces.
  void RecvInto(int peer, uint64_t message, size_t bytes,
                std::shared_ptr<transport::LandingSink> sink) {
    transport::Connection* connection = ConnectionTo(peer);
    if (connection == nullptr) return;
    recvs_.push_back(Posted{
        connection->PostRecvInto(bytes, MessageTag(ctx_.sequence, message), std::move(sink)), peer,
        message});
  }
  Status WaitReceives() {
    while (status_.ok() && !recvs_.empty()) status_ = WaitFront(recvs_, false);
    return status_;
  }
  Status WaitOldest() {
    if (status_.ok() && !recvs_.empty()) status_ = WaitFront(recvs_, false);
    if (status_.ok() && !sends_.empty()) status_ = WaitFront(sends_, true);
    return status_;
  }
  Status Wait() {
    if (!WaitReceives().ok()) return status_;
    while (status_.ok() && !sends_.empty()) status_ = WaitFront(sends_, true);
    return status_;
  }
  bool ok() const { return status_.ok(); }

 private:
  struct Posted {
    transport::RequestPtr request;
    int peer;
    uint64_t message;
  };
  transport::Connection* ConnectionTo(int peer) {
    if (!status_.ok()) return nullptr;
    if (ctx_.connection.made != nullptr && ctx_.connection.made[peer] != nullptr) {
      return ctx_.connection.made[peer];
    }
    return Connect(peer);
  }
  transport::Connection* Connect(int peer);  // a link not made yet; null with status_ set
  Status WaitFront(InlineFifo<Posted, 16>& list, bool sending) {
    Status status = list.front().request->Wait(ctx_.deadline);
    if (!status.ok()) status = Failed(status, sending, list.front().message, list.front().peer);
    list.pop_front();
    return status;
  }
  [[gnu::cold]] Status Failed(const Status& status, bool sending, uint64_t message,
                              int peer) const;

  const CollectiveContext& ctx_;
  const CollectiveArgs& args_;
  const char* const algorithm_;
  const size_t elem_;
  Status status_;
  InlineFifo<Posted, 16> recvs_;  // posted, not yet waited for, oldest first
  InlineFifo<Posted, 16> sends_;
};

}  // namespace braid::algorithms
