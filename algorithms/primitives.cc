#include "algorithms/primitives.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "algorithms/operation_context.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

Primitives::Primitives(const CollectiveContext& ctx, const CollectiveArgs& args,
                       const char* algorithm)
    : ctx_(ctx),
      args_(args),
      algorithm_(algorithm),
      elem_(DataTypeSize(args.type)),
      chunk_elems_(std::max<size_t>(1, ctx.chunk_bytes / DataTypeSize(args.type))) {}

Status Primitives::Connect(int prev, int next) {
  prev_rank_ = prev;
  next_rank_ = next;
  // On two ranks prev and next are the same peer, and one connection carries both streams.
  for (auto [peer, link] : {std::pair{prev, &prev_}, std::pair{next, &next_}}) {
    if (peer < 0) continue;
    auto connection = ctx_.connection(peer);
    if (!connection.ok()) {
      status_ = connection.status().WithContext(Describe());
      return status_;
    }
    *link = connection.value();
  }
  return Status::Ok();
}

Span Primitives::Slice(size_t count, size_t index) const {
  size_t begin = std::min(count, index * chunk_elems_);
  return Span{begin, std::min(count, begin + chunk_elems_) - begin};
}

void Primitives::Send(const void* src, Span span) {
  if (span.count == 0) return;
  Issue(Op{Move::kSend, nullptr, static_cast<const char*>(src) + span.offset * elem_, span.count,
           -1, 0, nullptr});
}

void Primitives::Recv(void* dst, Span span) {
  if (span.count == 0) return;
  Issue(Op{Move::kRecv, static_cast<char*>(dst) + span.offset * elem_, nullptr, span.count, -1, 0,
           nullptr});
}

void Primitives::RecvCopySend(void* dst, Span span) {
  if (span.count == 0) return;
  Issue(Op{Move::kRecvCopySend, static_cast<char*>(dst) + span.offset * elem_, nullptr, span.count,
           -1, 0, nullptr});
}

void Primitives::RecvReduceSend(const void* own, Span span) {
  if (span.count == 0) return;
  Issue(Op{Move::kRecvReduceSend, nullptr, static_cast<const char*>(own) + span.offset * elem_,
           span.count, -1, 0, nullptr});
}

void Primitives::RecvReduceCopySend(void* dst, const void* own, Span span) {
  if (span.count == 0) return;
  Issue(Op{Move::kRecvReduceCopySend, static_cast<char*>(dst) + span.offset * elem_,
           static_cast<const char*>(own) + span.offset * elem_, span.count, -1, 0, nullptr});
}

void Primitives::RecvReduce(void* dst, const void* own, Span span) {
  if (span.count == 0) return;
  Issue(Op{Move::kRecvReduce, static_cast<char*>(dst) + span.offset * elem_,
           static_cast<const char*>(own) + span.offset * elem_, span.count, -1, 0, nullptr});
}

void Primitives::Issue(Op op) {
  if (!status_.ok()) return;
  if (op.move != Move::kSend) {
    if (prev_ == nullptr) {
      status_ = Status::Internal(Describe() +
                                 ": a receive was issued on a channel with no previous rank");
      return;
    }
    // Keep at most kWindow receives ahead: carry out the oldest moves until one frees up.
    while (pending_recvs_ >= kWindow) {
      status_ = RunFront();
      if (!status_.ok()) return;
    }
    char* target = op.dst;
    const bool reducing = op.move == Move::kRecvReduceSend ||
                          op.move == Move::kRecvReduceCopySend || op.move == Move::kRecvReduce;
    // A partial result that is forwarded stays in a slot until its send completes; everything
    // else a reducing move needs a slot for is the message itself, which a reduction as it
    // lands never stores.
    op.reduced = reducing && prev_->LandsInPlace();
    if (reducing && (!op.reduced || op.move == Move::kRecvReduceSend)) {
      Result<int> slot = AcquireSlot();
      if (!slot.ok()) {
        status_ = slot.status();
        return;
      }
      op.slot = slot.value();
      target = slots_ + static_cast<size_t>(op.slot) * chunk_elems_ * elem_;
    }
    op.message = recv_messages_++;
    const uint64_t tag = MessageTag(ctx_.sequence, op.message);
    if (op.reduced) {
      if (sinks_ == nullptr) sinks_ = TakeReduceSinks<kWindow>();
      ReduceSink* sink = &(*sinks_)[op.message % kWindow];
      // The operand orders are those of the ReduceInto calls in Run(), so results do not depend
      // on the transport.
      sink->Reset(target, op.src, args_.type, args_.op, op.move == Move::kRecvReduceSend);
      op.recv = prev_->PostRecvInto(op.count * elem_, tag,
                                    std::shared_ptr<transport::LandingSink>(sinks_, sink));
    } else {
      op.recv = prev_->PostRecv(target, op.count * elem_, tag);
    }
    ++pending_recvs_;
  }
  queue_.push_back(std::move(op));
  status_ = RunReady();
}

// Carries out moves from the front of the queue for as long as none of them has to wait.
Status Primitives::RunReady() {
  while (!queue_.empty() && (queue_.front().recv == nullptr || queue_.front().recv->Test())) {
    BRAID_RETURN_IF_ERROR(RunFront());
  }
  return ReapSends();
}

Status Primitives::RunFront() {
  Op op = std::move(queue_.front());
  queue_.pop_front();
  return Run(op);
}

Status Primitives::Run(Op& op) {
  if (op.recv != nullptr) {
    --pending_recvs_;
    Status status = op.recv->Wait(ctx_.deadline);
    if (!status.ok()) return Fail(status, true, op.message);
  }
  char* slot =
      op.slot >= 0 ? slots_ + static_cast<size_t>(op.slot) * chunk_elems_ * elem_ : nullptr;
  switch (op.move) {
    case Move::kSend:
      return PostSend(op.src, op.count, -1);
    case Move::kRecv:
      return Status::Ok();
    case Move::kRecvCopySend:
      return PostSend(op.dst, op.count, -1);
    case Move::kRecvReduceSend:
      // The partial result stays in the slot, which is held until its send completes.
      if (!op.reduced) kernels::ReduceInto(args_.type, args_.op, slot, slot, op.src, op.count);
      return PostSend(slot, op.count, op.slot);
    case Move::kRecvReduceCopySend:
      if (!op.reduced) kernels::ReduceInto(args_.type, args_.op, op.dst, op.src, slot, op.count);
      Complete(op.dst, op.count);
      return PostSend(op.dst, op.count, -1);
    case Move::kRecvReduce:
      if (!op.reduced) kernels::ReduceInto(args_.type, args_.op, op.dst, op.src, slot, op.count);
      Complete(op.dst, op.count);
      return Status::Ok();
  }
  return Status::Internal(Describe() + ": unknown move");
}

// A complete reduction: kAvg divides it here, once, before it is forwarded or returned.
void Primitives::Complete(char* dst, size_t count) const {
  if (args_.op == ReduceOp::kAvg) kernels::DivideInPlace(args_.type, dst, count, ctx_.size);
}

Status Primitives::PostSend(const char* data, size_t count, int slot) {
  if (next_ == nullptr) {
    return Status::Internal(Describe() + ": a send was issued on a channel with no next rank");
  }
  const uint64_t message = send_messages_++;
  transport::RequestPtr request =
      next_->PostSend(data, count * elem_, MessageTag(ctx_.sequence, message));
  if (slot >= 0) slot_sends_[slot] = PendingSend{request, message};
  sends_.push_back(PendingSend{std::move(request), message});
  return ReapSends();
}

// Drops finished sends from the front so the list stays short on long buffers. It only looks
// (IsDone), it does not drive the transport (Test): a driving test after every move is a
// non-blocking send/receive round on every TCP connection with work, and the receive waits of
// the next moves and Finish() drive the sends anyway (2 ranks over TCP, chain reduce of
// 32-128 KiB: 12.0-34.7 -> 9.4-28.8 us, interleaved A/B).
Status Primitives::ReapSends() {
  while (!sends_.empty() && sends_.front().request->IsDone()) {
    const PendingSend& send = sends_.front();
    if (!send.request->status().ok()) return Fail(send.request->status(), false, send.message);
    sends_.pop_front();
  }
  return Status::Ok();
}

Result<int> Primitives::AcquireSlot() {
  if (slots_ == nullptr) {
    slots_ = static_cast<char*>(ctx_.scratch(kSlots * chunk_elems_ * elem_));
  }
  const int slot = static_cast<int>(next_slot_++ % kSlots);
  PendingSend& last = slot_sends_[slot];
  if (last.request != nullptr) {
    Status status = last.request->Wait(ctx_.deadline);
    if (!status.ok()) return Fail(status, false, last.message);
    last.request = nullptr;
  }
  return slot;
}

Status Primitives::Finish() {
  while (status_.ok() && !queue_.empty()) status_ = RunFront();
  while (status_.ok() && !sends_.empty()) {
    const PendingSend& send = sends_.front();
    Status status = send.request->Wait(ctx_.deadline);
    if (!status.ok()) status_ = Fail(status, false, send.message);
    sends_.pop_front();
  }
  for (PendingSend& slot : slot_sends_) slot.request = nullptr;
  return status_;
}

Status Primitives::Fail(const Status& status, bool receiving, uint64_t message) const {
  return status.WithContext(Describe() +
                            (receiving ? ": receiving message " : ": sending message ") +
                            std::to_string(message) + (receiving ? " from rank " : " to rank ") +
                            std::to_string(
                                CommunicatorRank(ctx_, receiving ? prev_rank_ : next_rank_)));
}

// "rank 2: reduce #17 (1021 x float, sum, root 0, ring)" (operation_context.h); built only when
// something failed.
std::string Primitives::Describe() const { return OperationContext(ctx_, args_, algorithm_); }

}  // namespace braid::algorithms
