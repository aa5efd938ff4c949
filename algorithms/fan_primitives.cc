#include "algorithms/fan_primitives.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "algorithms/operation_context.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

FanPrimitives::FanPrimitives(const CollectiveContext& ctx, const CollectiveArgs& args,
                             const char* algorithm, Options options)
    : ctx_(ctx),
      args_(args),
      algorithm_(algorithm),
      elem_(DataTypeSize(args.type)),
      chunk_elems_(std::max<size_t>(1, ctx.chunk_bytes / DataTypeSize(args.type))),
      slot_elems_(options.slot_elems > 0 ? options.slot_elems : chunk_elems_),
      window_(std::max<size_t>(1, options.window)),
      acc_slots_(options.acc_slots),
      own_slot_(options.own_slot) {
  if (ctx.size > kInlineLinks) heap_links_.reset(new Link[static_cast<size_t>(ctx.size)]());
}

FanPrimitives::Link* FanPrimitives::MakeLink(int peer) {
  Link* links = inline_links_;
  if (heap_links_ != nullptr) {
    links = heap_links_.get();
  } else if ((inline_used_ & (uint32_t{1} << peer)) == 0) {
    inline_used_ |= uint32_t{1} << peer;
    links[peer] = Link{nullptr, 0, 0};
  }
  Link& link = links[peer];
  if (link.connection == nullptr && ctx_.connection.made != nullptr) {
    link.connection = ctx_.connection.made[peer];  // made before: no call, no Result
  }
  if (link.connection == nullptr) {
    auto connection = ctx_.connection(peer);
    if (!connection.ok()) {
      status_ = connection.status().WithContext(Describe() + ": connecting to rank " +
                                                std::to_string(peer));
      return nullptr;
    }
    link.connection = connection.value();
  }
  return &link;
}

Status FanPrimitives::Connect(PeerSet peers) {
  for (size_t i = 0; i < peers.size() && status_.ok(); ++i) {
    if (peers[i] == ctx_.rank) continue;
    LinkTo(peers[i]);
  }
  return status_;
}

void FanPrimitives::Send(PeerSet to, const void* src, Span span) {
  if (span.count == 0 || to.empty()) return;
  Op op{};
  op.action = Action::kNone;
  op.from = -1;
  op.src = static_cast<const char*>(src) + span.offset * elem_;
  op.count = span.count;
  op.to = to;
  Issue(op);
}

void FanPrimitives::Recv(int from, void* dst, Span span) { RecvCopySend(from, dst, PeerSet(), span); }

void FanPrimitives::RecvCopySend(int from, void* dst, PeerSet to, Span span) {
  if (span.count == 0) return;
  Op op{};
  op.action = Action::kNone;
  op.from = from;
  op.dst = static_cast<char*>(dst) + span.offset * elem_;
  op.slot = op.dst;  // lands straight in the caller's buffer
  op.count = span.count;
  op.to = to;
  Issue(op);
}

void FanPrimitives::RecvReduce(PeerSet from, void* dst, const void* own, Span span) {
  FanIn(from, dst, own, PeerSet(), span, /*complete=*/true, /*accumulate=*/false);
}

void FanPrimitives::RecvReduceSend(PeerSet from, void* dst, const void* own, PeerSet to,
                                   Span span) {
  FanIn(from, dst, own, to, span, /*complete=*/false, /*accumulate=*/dst == nullptr);
}

void FanPrimitives::Copy(void* dst, const void* src, Span span) {
  if (span.count == 0) return;
  Op op{};
  op.action = Action::kCopy;
  op.from = -1;
  op.dst = static_cast<char*>(dst) + span.offset * elem_;
  op.src = static_cast<const char*>(src) + span.offset * elem_;
  op.count = span.count;
  Issue(op);
}

void FanPrimitives::Signal(PeerSet to) {
  if (to.empty()) return;
  Op op{};
  op.action = Action::kNone;
  op.from = -1;
  op.src = &token_;
  op.to = to;
  Issue(op);
}

void FanPrimitives::Await(int from) {
  Op op{};
  op.action = Action::kNone;
  op.from = from;
  op.dst = &token_;
  op.slot = &token_;
  Issue(op);
}

// One operation per contribution after the first: contribution i (i >= 1) is combined into the
// accumulator, which is contribution 0 for i == 1 and dst afterwards; a message contribution is
// that operation's receive. A first contribution that is a message lands in its slot (kLand) for
// the next operation to read.
void FanPrimitives::FanIn(PeerSet from, void* dst, const void* own, PeerSet to, Span span,
                          bool complete, bool accumulate) {
  if (span.count == 0 || !status_.ok()) return;
  if (span.count > slot_elems_) {
    status_ = Status::Internal(Describe() + ": a reducing move of " + std::to_string(span.count) +
                               " elements exceeds the scratch slot of " +
                               std::to_string(slot_elems_));
    return;
  }
  const char* mine = static_cast<const char*>(own) + span.offset * elem_;
  char* target;
  if (accumulate) {
    if (acc_slots_ == 0) {
      status_ = Status::Internal(Describe() + ": an accumulating move needs accumulator slots");
      return;
    }
    target = Slots() + (window_ + next_acc_++ % acc_slots_) * slot_elems_ * elem_;
  } else {
    target = static_cast<char*>(dst) + span.offset * elem_;
  }
  // Where this rank's own contribution stands: first unless `from` lists this rank.
  size_t own_at = 0;
  bool listed = false;
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] == ctx_.rank) {
      own_at = i;
      listed = true;
      break;
    }
  }
  const size_t contributions = from.size() + (listed ? 0 : 1);
  auto contributor = [&](size_t i) {  // rank of contribution i (ctx_.rank: own)
    if (listed) return from[i];
    return i == 0 ? ctx_.rank : from[i - 1];
  };
  if (contributions == 1) {  // nothing to receive: the result is own
    if (accumulate) {
      Send(to, mine, Span{0, span.count});
      return;
    }
    Op op{};
    op.action = Action::kCopy;
    op.from = -1;
    op.dst = target;
    op.src = mine;
    op.count = span.count;
    op.complete = complete;
    op.to = to;
    Issue(op);
    return;
  }
  if (contributor(0) != ctx_.rank && contributor(1) != ctx_.rank && window_ < 2) {
    // The first message waits in its slot for the second contribution's receive.
    status_ = Status::Internal(Describe() + ": a fan-in that starts with two messages needs a "
                                            "window of two receives");
    return;
  }
  // In place, own is dst, which the first combination overwrites: where own comes after that,
  // it is read from a copy (the direct allreduce's ranks >= 2; trees list own first).
  if (own_at >= 2 && mine == target) {
    if (!own_slot_) {
      status_ = Status::Internal(Describe() + ": an in-place fan-in that reads its own "
                                              "contribution late needs Options::own_slot");
      return;
    }
    char* copy = Slots() + (window_ + acc_slots_) * slot_elems_ * elem_;
    Copy(copy, mine, Span{0, span.count});
    mine = copy;
  }
  // Every receive of the fan is posted before any of its operations runs: an operation may block
  // on a send (AwaitSendsReading), and the peer that must copy it may be blocked on its own send
  // until this rank's receive for its message is posted.
  running_ = false;
  for (size_t i = 0; i < contributions; ++i) {
    const int rank = contributor(i);
    const bool message = rank != ctx_.rank;
    if (i == 0) {
      if (!message) continue;
      Op land{};
      land.action = Action::kLand;
      land.from = rank;
      land.count = span.count;
      Issue(land);  // sets last_landed_ to its slot
      if (!status_.ok()) break;
      continue;
    }
    Op op{};
    op.action = Action::kReduce;
    op.from = message ? rank : -1;
    op.dst = target;
    op.src = mine;
    op.count = span.count;
    op.rhs = message ? Operand::kMessage : Operand::kOwn;
    if (i == 1) {
      const int first = contributor(0);
      op.lhs = first == ctx_.rank ? Operand::kOwn : Operand::kLanded;
      op.consumes = first != ctx_.rank;
      op.landed = op.consumes ? last_landed_ : nullptr;
    } else {
      op.lhs = Operand::kAcc;
    }
    if (i + 1 == contributions) {
      op.complete = complete;
      op.to = to;
    }
    Issue(op);
    if (!status_.ok()) break;
  }
  running_ = true;
  if (status_.ok()) status_ = RunReady();
}

void FanPrimitives::Issue(Op& op) {
  if (!status_.ok()) return;
  if (op.from >= 0) {
    // Keep at most window_ receives ahead: carry out the oldest moves until one frees up.
    while (pending_recvs_ >= window_ && !queue_.empty()) {
      status_ = RunFront();
      if (!status_.ok()) return;
    }
    Link* link = LinkTo(op.from);
    if (link == nullptr) return;
    if (op.slot == nullptr) {  // a contribution of a reducing move: it lands in a receive slot
      op.slot = Slots() + (next_slot_++ % window_) * slot_elems_ * elem_;
      if (op.action == Action::kLand) last_landed_ = op.slot;
    }
    op.message = link->received++;
    op.recv = link->connection->PostRecv(op.slot, op.count * elem_,
                                                 MessageTag(ctx_.sequence, op.message));
    ++pending_recvs_;
  }
  queue_.push_back(std::move(op));
  if (running_) status_ = RunReady();
}

// Carries out moves from the front of the queue for as long as none of them has to wait. It only
// looks (IsDone), it does not drive the transport (Test): a driving test after every move is a
// pass over the connection's ring or socket (on shm ~100 instructions each, which doubled the
// cost of a direct gather of 8 bytes), and the blocking waits of a full window, of a send still
// being read and of Flush() drive every posted receive anyway, as the hand-written algorithms'
// in-order waits did.
Status FanPrimitives::RunReady() {
  while (!queue_.empty() &&
         (queue_.front().recv == nullptr || queue_.front().recv->IsDone())) {
    BRAID_RETURN_IF_ERROR(RunFront());
  }
  return ReapSends();
}

Status FanPrimitives::RunFront() {
  Op op = std::move(queue_.front());
  queue_.pop_front();
  return Run(op);
}

Status FanPrimitives::Run(Op& op) {
  if (op.recv != nullptr) {
    // A landed message keeps its window place (and slot) until the next operation reads it.
    if (op.action != Action::kLand) --pending_recvs_;
    Status status = op.recv->Wait(ctx_.deadline);
    if (!status.ok()) return Fail(status, "receiving", op.message, op.from);
  }
  if (op.consumes) --pending_recvs_;
  const char* data = op.recv != nullptr ? op.dst : op.src;
  switch (op.action) {
    case Action::kNone:
      break;
    case Action::kLand:
      return Status::Ok();
    case Action::kReduce: {
      auto operand = [&](Operand which) -> const char* {
        switch (which) {
          case Operand::kOwn:
            return op.src;
          case Operand::kAcc:
            return op.dst;
          case Operand::kMessage:
            return op.slot;
          case Operand::kLanded:
            return op.landed;
        }
        return nullptr;
      };
      BRAID_RETURN_IF_ERROR(AwaitSendsReading(op.dst, op.count * elem_));
      kernels::ReduceInto(args_.type, args_.op, op.dst, operand(op.lhs), operand(op.rhs),
                          op.count);
      if (op.complete && args_.op == ReduceOp::kAvg) {
        kernels::DivideInPlace(args_.type, op.dst, op.count, ctx_.size);
      }
      data = op.dst;
      break;
    }
    case Action::kCopy:
      if (op.dst != op.src) {
        BRAID_RETURN_IF_ERROR(AwaitSendsReading(op.dst, op.count * elem_));
        std::memcpy(op.dst, op.src, op.count * elem_);
      }
      if (op.complete && args_.op == ReduceOp::kAvg) {
        kernels::DivideInPlace(args_.type, op.dst, op.count, ctx_.size);
      }
      data = op.dst;
      break;
  }
  if (op.to.empty()) return Status::Ok();
  return SendFrom(data, op.count, op.to);
}

Status FanPrimitives::SendFrom(const char* data, size_t count, PeerSet to) {
  for (size_t i = 0; i < to.size(); ++i) {
    const int peer = to[i];
    Link* link = LinkTo(peer);
    if (link == nullptr) return status_;
    const uint64_t message = link->sent++;
    transport::RequestPtr request = link->connection->PostSend(
        data, count * elem_, MessageTag(ctx_.sequence, message));
    sends_.push_back(PendingSend{std::move(request), peer, message, data, count * elem_});
  }
  return ReapSends();
}

// Drops finished sends from the front so the list stays short on long buffers. It only looks
// (IsDone), it does not drive the transport (Test): the receive waits of the next moves and
// Flush() drive the sends anyway (primitives.cc measured the difference over TCP).
Status FanPrimitives::ReapSends() {
  while (!sends_.empty() && sends_.front().request->IsDone()) {
    const PendingSend& send = sends_.front();
    if (!send.request->status().ok()) {
      return Fail(send.request->status(), "sending", send.message, send.peer);
    }
    sends_.pop_front();
  }
  return Status::Ok();
}

// Waits for every posted send whose data overlaps [begin, begin + bytes): a transport may read a
// send's buffer until the send completes (shared memory reads large messages straight from it).
// Before blocking on a send it completes the receives already posted: such a send completes when
// the peer copies it, which the peer does while it waits on its own receives, and a rank that
// waits on its sends while its peers wait on theirs would wait forever (the direct allreduce in
// place, every rank's sends reading the buffer it reduces into). Every posted receive's sender
// posted it before blocking on anything of this rank's later moves, so waiting for it is safe.
// The lists keep their order: each entry is taken from the front and put back at the end.
Status FanPrimitives::AwaitSendsReading(const char* begin, size_t bytes) {
  const char* end = begin + bytes;
  bool blocking = false;
  for (size_t i = 0, n = sends_.size(); i < n; ++i) {
    PendingSend send = std::move(sends_.front());
    sends_.pop_front();
    blocking |= send.data < end && begin < send.data + send.bytes && !send.request->IsDone();
    sends_.push_back(std::move(send));
  }
  if (!blocking) return Status::Ok();
  for (size_t i = 0, n = queue_.size(); i < n; ++i) {
    Op op = std::move(queue_.front());
    queue_.pop_front();
    Status status = op.recv != nullptr ? op.recv->Wait(ctx_.deadline) : Status::Ok();
    if (!status.ok()) return Fail(status, "receiving", op.message, op.from);
    queue_.push_back(std::move(op));
  }
  for (size_t i = 0, n = sends_.size(); i < n; ++i) {
    PendingSend send = std::move(sends_.front());
    sends_.pop_front();
    if (send.data < end && begin < send.data + send.bytes && !send.request->IsDone()) {
      Status status = send.request->Wait(ctx_.deadline);
      if (!status.ok()) return Fail(status, "sending", send.message, send.peer);
    }
    sends_.push_back(std::move(send));
  }
  return Status::Ok();
}

char* FanPrimitives::Slots() {
  if (slots_ == nullptr) {
    // Receive slots, accumulators, and the slot for an in-place own contribution.
    const size_t slots = window_ + acc_slots_ + (own_slot_ ? 1 : 0);
    slots_ = static_cast<char*>(ctx_.scratch(slots * slot_elems_ * elem_));
  }
  return slots_;
}

Status FanPrimitives::Flush() {
  while (status_.ok() && !queue_.empty()) status_ = RunFront();
  while (status_.ok() && !sends_.empty()) {
    const PendingSend& send = sends_.front();
    Status status = send.request->Wait(ctx_.deadline);
    if (!status.ok()) status_ = Fail(status, "sending", send.message, send.peer);
    sends_.pop_front();
  }
  return status_;
}

namespace {

// "<context>: receiving message 3 from rank 1" / "<context>: sending message 0 to rank 2".
[[gnu::cold]] Status MessageFailure(const Status& status, const CollectiveContext& ctx,
                                    const CollectiveArgs& args, const char* algorithm,
                                    const char* doing, uint64_t message, int peer) {
  const bool receiving = doing[0] == 'r';
  return status.WithContext(OperationContext(ctx, args, algorithm) + ": " + doing + " message " +
                            std::to_string(message) + (receiving ? " from rank " : " to rank ") +
                            std::to_string(peer));
}

}  // namespace

Status FanPrimitives::Fail(const Status& status, const char* doing, uint64_t message,
                           int peer) const {
  return MessageFailure(status, ctx_, args_, algorithm_, doing, message, peer);
}

// "rank 2: reduce #17 (1021 x float, sum, root 0, binomial)" (operation_context.h); built only
// when something failed.
std::string FanPrimitives::Describe() const { return OperationContext(ctx_, args_, algorithm_); }

// The send is posted first: both partners wait for each other's message, so time between the
// partner's data landing and this rank's send leaving is paid by the partner on every step; a
// connection keeps a message that arrives first until its receive is posted.
Status PairExchange::ExchangeLanding(int peer, uint64_t message, const char* send,
                                     size_t send_bytes, char* target, const char* own,
                                     size_t recv_bytes, bool peer_first) {
  BRAID_ASSIGN_OR_RETURN(transport::Connection * connection, ctx_.connection(peer));
  if (!connection->LandsInPlace()) {
    if (recv_bytes > slot_elems_ * elem_) return SlotTooSmall(recv_bytes / elem_);
    if (slot_ == nullptr) slot_ = static_cast<char*>(ctx_.scratch(slot_elems_ * elem_));
    BRAID_RETURN_IF_ERROR(ExchangeBytes(peer, message, send, send_bytes, slot_, recv_bytes));
    kernels::ReduceInto(args_.type, args_.op, target, peer_first ? slot_ : own,
                        peer_first ? own : slot_, recv_bytes / elem_);
    return Status::Ok();
  }
  const uint64_t tag = MessageTag(ctx_.sequence, message);
  transport::RequestPtr out;
  if (send_bytes > 0) out = connection->PostSend(send, send_bytes, tag);
  std::shared_ptr<ReduceSink>& sink = *sink_;
  if (sink == nullptr) sink = std::make_shared<ReduceSink>();
  sink->Reset(target, own, args_.type, args_.op, peer_first);
  Status status = connection->PostRecvInto(recv_bytes, tag, sink)->Wait(ctx_.deadline);
  if (!status.ok()) return Failed(status, false, message, peer);
  if (out != nullptr) {
    status = out->Wait(ctx_.deadline);
    if (!status.ok()) return Failed(status, true, message, peer);
  }
  return Status::Ok();
}

Status PairExchange::Failed(const Status& status, bool sending, uint64_t message,
                            int peer) const {
  return MessageFailure(status, ctx_, args_, algorithm_, sending ? "sending" : "receiving",
                        message, peer);
}

Status PairExchange::SlotTooSmall(size_t count) const {
  return Status::Internal(OperationContext(ctx_, args_, algorithm_) + ": an exchange of " +
                          std::to_string(count) + " elements exceeds the slot of " +
                          std::to_string(slot_elems_));
}

transport::Connection* FanRound::Connect(int peer) {
  auto connection = ctx_.connection(peer);
  if (!connection.ok()) {
    status_ = connection.status().WithContext(OperationContext(ctx_, args_, algorithm_) +
                                              ": connecting to rank " + std::to_string(peer));
    return nullptr;
  }
  return connection.value();
}

Status FanRound::Failed(const Status& status, bool sending, uint64_t message, int peer) const {
  return MessageFailure(status, ctx_, args_, algorithm_, sending ? "sending" : "receiving",
                        message, peer);
}

}  // namespace braid::algorithms
