#include "transport/cuda_ipc/cuda_ipc_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace braid::transport::cuda_ipc {
namespace {

// A cursor from the low 32 bits a flag holds, given the last value seen (cursors only grow, and
// never by 2 GiB between two reads: the ring is far smaller).
uint64_t Advance(uint64_t seen, const uint32_t* flag) {
  const uint32_t now = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
  return seen + static_cast<uint32_t>(now - static_cast<uint32_t>(seen));
}

uint64_t AlignUp(uint64_t x) { return (x + kMessageAlign - 1) / kMessageAlign * kMessageAlign; }

constexpr int64_t kDrainStreamsMs = 2000;

}  // namespace

Link::Link(int rank, int peer, int socket, std::shared_ptr<device::Device> device,
           std::unique_ptr<device::Stream> send_stream, std::unique_ptr<device::Stream> recv_stream,
           std::shared_ptr<Inbox> inbox, std::shared_ptr<Inbox> outbox)
    : rank_(rank),
      peer_(peer),
      socket_(socket),
      device_(std::move(device)),
      inbox_(std::move(inbox)),
      outbox_(std::move(outbox)),
      send_stream_(std::move(send_stream)),
      recv_stream_(std::move(recv_stream)) {
  // Both sides start their cursors where the rings are now (0 for a fresh link).
  fill_ = planned_ = ready_seen_ = consumed_seen_ = 0;
  drain_ = incoming_seen_ = drained_seen_ = 0;
}

Link::~Link() {
  Close(Status::Aborted("rank " + std::to_string(rank_) + ": the cuda_ipc link to rank " + std::to_string(peer_) +
                        " was destroyed"));
  send_stream_.reset();
  recv_stream_.reset();
  ::close(socket_);
}

std::string Link::Named(const std::string& what) const {
  return "rank " + std::to_string(rank_) + ": " + what;
}

Status Link::LostStatus() const {
  return Status::RemoteError(Named("rank " + std::to_string(peer_) + " is gone: " + gone_why_));
}

RequestPtr Link::Failed(const Status& status) {
  auto request = std::make_shared<Request>();
  request->Complete(status);
  return request;
}

bool Link::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !failure_.ok();
}

RequestPtr Link::PostSend(const void* data, size_t bytes, uint64_t tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.ok()) return Failed(failure_);
  if (peer_gone_) return Failed(LostStatus());
  if (bytes > 0 && data == nullptr) {
    return Failed(Status::InvalidArgument(Named("cuda_ipc send of " + std::to_string(bytes) + " bytes from null")));
  }
  auto request = std::make_shared<Request>();
  SendOp op;
  op.request = request;
  op.src = static_cast<const uint8_t*>(data);
  op.bytes = bytes;
  op.tag = tag;
  sends_.push_back(op);
  return request;
}

RequestPtr Link::PostRecv(void* data, size_t bytes, uint64_t tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.ok()) return Failed(failure_);
  if (bytes > 0 && data == nullptr) {
    return Failed(Status::InvalidArgument(Named("cuda_ipc receive of " + std::to_string(bytes) + " bytes into null")));
  }
  auto request = std::make_shared<Request>();
  RecvOp op;
  op.request = request;
  op.dst = static_cast<uint8_t*>(data);
  op.bytes = bytes;
  op.tag = tag;
  recvs_.push_back(op);
  return request;
}

Result<std::optional<Connection::Incoming>> Link::Probe() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.ok()) return failure_;
  for (const RecvOp& op : recvs_) {
    if (op.request != nullptr) {
      return Status::Internal(Named("Probe on the link to rank " + std::to_string(peer_) +
                                    " while a receive is pending there"));
    }
  }
  Control* control = inbox_->control();
  const uint64_t taken = control->headers_taken;  // only this host writes it
  const uint64_t posted = __atomic_load_n(&control->headers_posted, __ATOMIC_ACQUIRE);
  if (taken < posted) {
    const Header& header = control->headers[taken % kHeaderSlots];
    return std::optional<Connection::Incoming>(Connection::Incoming{header.tag, header.bytes});
  }
  if (peer_gone_) return LostStatus();
  return std::optional<Connection::Incoming>();
}

void Link::Close(const Status& reason) {
  std::vector<RequestPtr> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return;
    failure_ = reason.ok() ? Status::Aborted(Named("link closed")) : reason;
    for (SendOp& op : sends_) pending.push_back(op.request);
    for (RecvOp& op : recvs_) {
      if (op.request != nullptr) pending.push_back(op.request);
    }
    sends_.clear();
    recvs_.clear();
  }
  // No copy may touch a caller's buffer once its request failed: everything enqueued finishes
  // by itself (nothing waits on the peer), so this is quick.
  if (send_stream_ != nullptr) send_stream_->Synchronize(Deadline::AfterMs(kDrainStreamsMs)).ok();
  if (recv_stream_ != nullptr) recv_stream_->Synchronize(Deadline::AfterMs(kDrainStreamsMs)).ok();
  ::shutdown(socket_, SHUT_RDWR);  // the peer sees end of file
  for (RequestPtr& request : pending) request->Complete(failure_);
}

void Link::PeerGone(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer_gone_) return;
  peer_gone_ = true;
  gone_why_ = why;
}

uint64_t Link::ReadReady() { return ready_seen_ = Advance(ready_seen_, &outbox_->control()->ready); }
uint64_t Link::ReadConsumed() { return consumed_seen_ = Advance(consumed_seen_, &outbox_->control()->consumed); }
uint64_t Link::ReadIncoming() { return incoming_seen_ = Advance(incoming_seen_, &inbox_->control()->ready); }
uint64_t Link::ReadDrained() { return drained_seen_ = Advance(drained_seen_, &inbox_->control()->consumed); }

bool Link::ProgressSends(std::vector<std::pair<RequestPtr, Status>>* done, Status* stream_error) {
  bool worked = false;
  Control* control = outbox_->control();
  const uint64_t ring = outbox_->ring_bytes();
  // Headers first, in order, as far as the peer's header slots allow.
  uint64_t posted = control->headers_posted;  // only this host writes it
  const uint64_t taken = __atomic_load_n(&control->headers_taken, __ATOMIC_ACQUIRE);
  for (SendOp& op : sends_) {
    if (op.headed) continue;
    if (posted - taken >= kHeaderSlots) break;
    op.start = op.bytes > 0 ? AlignUp(planned_) : planned_;
    planned_ = op.start + op.bytes;
    control->headers[posted % kHeaderSlots] = Header{op.tag, op.bytes, op.start};
    __atomic_store_n(&control->headers_posted, ++posted, __ATOMIC_RELEASE);
    op.headed = true;
    worked = true;
  }
  // Then pieces into the peer's ring, as far as its drain cursor frees space (none once the peer
  // is gone: those sends fail, see Progress).
  const uint64_t consumed = ReadConsumed();
  for (SendOp& op : sends_) {
    if (peer_gone_) break;
    if (!op.headed) break;
    if (op.enqueued == op.bytes) continue;
    fill_ = std::max(fill_, op.start + op.enqueued);  // skips the alignment padding
    while (op.enqueued < op.bytes) {
      const uint64_t used = fill_ - consumed;
      const uint64_t space = used >= ring ? 0 : ring - used;
      const uint64_t at = fill_ % ring;
      const uint64_t length = std::min({op.bytes - op.enqueued, kPieceBytes, ring - at, space});
      if (length == 0) break;
      Status st = send_stream_->Copy(outbox_->ring() + at, op.src + op.enqueued, length);
      if (st.ok()) st = send_stream_->WriteValue32(&control->ready, static_cast<uint32_t>(fill_ + length));
      if (!st.ok()) {
        *stream_error = st.WithContext(Named("sending to rank " + std::to_string(peer_)));
        return true;
      }
      fill_ += length;
      op.enqueued += length;
      worked = true;
    }
    if (op.enqueued < op.bytes) break;
  }
  // A send is done once its last byte is in the peer's ring (its `ready` write has landed).
  const uint64_t ready = ReadReady();
  while (!sends_.empty()) {
    const SendOp& op = sends_.front();
    if (!op.headed || op.enqueued < op.bytes || (op.bytes > 0 && ready < op.start + op.bytes)) break;
    done->emplace_back(op.request, Status::Ok());
    sends_.pop_front();
    worked = true;
  }
  return worked;
}

bool Link::ProgressRecvs(std::vector<std::pair<RequestPtr, Status>>* done, Status* stream_error) {
  bool worked = false;
  Control* control = inbox_->control();
  const uint64_t ring = inbox_->ring_bytes();
  // Match headers with receives in posting order.
  uint64_t taken = control->headers_taken;  // only this host writes it
  const uint64_t posted = __atomic_load_n(&control->headers_posted, __ATOMIC_ACQUIRE);
  for (RecvOp& op : recvs_) {
    if (op.matched) continue;
    if (taken == posted) break;
    const Header header = control->headers[taken % kHeaderSlots];
    __atomic_store_n(&control->headers_taken, ++taken, __ATOMIC_RELEASE);
    if (header.tag != op.tag || header.bytes != op.bytes) {
      done->emplace_back(op.request,
                         Status::Internal(Named("message from rank " + std::to_string(peer_) + " has tag " +
                                                std::to_string(header.tag) + " and " + std::to_string(header.bytes) +
                                                " bytes, but the receive expects tag " + std::to_string(op.tag) +
                                                " and " + std::to_string(op.bytes) + " bytes")));
      op.request = nullptr;  // drained unread
      op.dst = nullptr;
      op.bytes = header.bytes;
      op.tag = header.tag;
    }
    op.matched = true;
    op.start = header.start;
    worked = true;
  }
  // Copy out what the peer's `ready` shows.
  const uint64_t incoming = ReadIncoming();
  for (RecvOp& op : recvs_) {
    if (!op.matched) break;
    if (op.enqueued == op.bytes) continue;
    drain_ = std::max(drain_, op.start + op.enqueued);
    while (op.enqueued < op.bytes) {
      const uint64_t available = incoming > drain_ ? incoming - drain_ : 0;
      const uint64_t at = drain_ % ring;
      const uint64_t length = std::min({op.bytes - op.enqueued, kPieceBytes, ring - at, available});
      if (length == 0) break;
      Status st = Status::Ok();
      if (op.dst != nullptr) st = recv_stream_->Copy(op.dst + op.enqueued, inbox_->ring() + at, length);
      if (st.ok()) st = recv_stream_->WriteValue32(&control->consumed, static_cast<uint32_t>(drain_ + length));
      if (!st.ok()) {
        *stream_error = st.WithContext(Named("receiving from rank " + std::to_string(peer_)));
        return true;
      }
      drain_ += length;
      op.enqueued += length;
      worked = true;
    }
    if (op.enqueued < op.bytes) break;
  }
  // A receive is done once its stream published the drain cursor past it (its copies are done).
  const uint64_t drained = ReadDrained();
  while (!recvs_.empty()) {
    const RecvOp& op = recvs_.front();
    if (!op.matched || op.enqueued < op.bytes || (op.bytes > 0 && drained < op.start + op.bytes)) break;
    if (op.request != nullptr) done->emplace_back(op.request, Status::Ok());
    recvs_.pop_front();
    worked = true;
  }
  // A peer that is gone sends nothing more: what cannot complete from what arrived fails.
  if (peer_gone_ && !recvs_.empty()) {
    const RecvOp& head = recvs_.front();
    const bool stuck = head.matched ? incoming < head.start + head.bytes : taken == posted;
    if (stuck) {
      for (RecvOp& op : recvs_) {
        if (op.request != nullptr) done->emplace_back(op.request, LostStatus());
      }
      recvs_.clear();
      worked = true;
    }
  }
  return worked;
}

bool Link::Progress(bool* pending) {
  std::vector<std::pair<RequestPtr, Status>> done;
  Status stream_error = Status::Ok();
  bool worked = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return false;
    worked = ProgressSends(&done, &stream_error);
    if (stream_error.ok()) worked = ProgressRecvs(&done, &stream_error) || worked;
    if (stream_error.ok() && peer_gone_ && !sends_.empty()) {
      for (SendOp& op : sends_) done.emplace_back(op.request, LostStatus());
      sends_.clear();
      worked = true;
    }
    if (!sends_.empty() || !recvs_.empty()) *pending = true;
  }
  // A request failed for a lost peer may have copies on a stream still (pieces of a send, or of
  // a receive that will not complete): they finish before the caller hears, so no copy touches
  // its buffer after the request failed. (A mismatch fails a receive before any copy of it.)
  bool lost = false;
  for (auto& entry : done) lost = lost || (!entry.second.ok() && entry.second.code() != Code::kInternalError);
  if (lost) {
    send_stream_->Synchronize(Deadline::AfterMs(kDrainStreamsMs)).ok();
    recv_stream_->Synchronize(Deadline::AfterMs(kDrainStreamsMs)).ok();
  }
  for (auto& [request, status] : done) request->Complete(status);
  if (!stream_error.ok()) Close(stream_error);
  return worked;
}

CudaIpcConnection::~CudaIpcConnection() {
  link_->Close(Status::Aborted("the connection to rank " + std::to_string(link_->peer()) + " was closed"));
}

RequestPtr CudaIpcConnection::PostSend(const void* data, size_t bytes, uint64_t tag) {
  RequestPtr request = link_->PostSend(data, bytes, tag);
  if (wake_) wake_();
  return request;
}

RequestPtr CudaIpcConnection::PostRecv(void* data, size_t bytes, uint64_t tag) {
  RequestPtr request = link_->PostRecv(data, bytes, tag);
  if (wake_) wake_();
  return request;
}

}  // namespace braid::transport::cuda_ipc
