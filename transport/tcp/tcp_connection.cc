#include "transport/tcp/tcp_connection.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/logging.h"

namespace braid::transport::tcp {
namespace {

// One gather write carries at most this many messages (two iovecs each: asio passes up to 64
// buffers to one sendmsg) and stops adding messages past kMaxBatchBytes, so that the first
// sends of a batch do not wait long for the last.
constexpr size_t kMaxBatchMessages = 32;
constexpr size_t kMaxBatchBytes = size_t{1} << 20;
// Payloads of refused messages are read through this buffer and dropped.
constexpr size_t kDiscardChunk = size_t{256} << 10;

RequestPtr FailedRequest(const Status& status) {
  auto request = std::make_shared<Request>();
  request->Complete(status);
  return request;
}

std::string Describe(const asio::error_code& ec) {
  if (ec == asio::error::eof) return "the peer closed the connection (end of file)";
  return ec.message();
}

}  // namespace

std::shared_ptr<TcpSession> TcpSession::Create(std::shared_ptr<asio::io_context> io,
                                               asio::ip::tcp::socket socket, int rank, int peer) {
  return std::shared_ptr<TcpSession>(new TcpSession(std::move(io), std::move(socket), rank, peer));
}

TcpSession::TcpSession(std::shared_ptr<asio::io_context> io, asio::ip::tcp::socket socket,
                       int rank, int peer)
    : io_(std::move(io)), socket_(std::move(socket)), rank_(rank), peer_(peer) {}

void TcpSession::Start() {
  asio::post(*io_, [self = shared_from_this()] { self->ReadHeader(); });
}

std::string TcpSession::LostMessage(const std::string& why) const {
  return "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer_) +
         " lost: " + why;
}

RequestPtr TcpSession::PostSend(const void* data, size_t bytes, uint64_t tag) {
  auto request = std::make_shared<Request>();
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return FailedRequest(failure_);
    SendOp op{request, MessageHeader{}, data};
    op.header.tag = tag;
    op.header.bytes = bytes;
    send_queue_.push_back(op);
    start = !writing_;
    writing_ = true;
  }
  if (start) asio::post(*io_, [self = shared_from_this()] { self->StartWrite(); });
  return request;
}

RequestPtr TcpSession::PostRecv(void* data, size_t bytes, uint64_t tag) {
  auto request = std::make_shared<Request>();
  bool resume = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return FailedRequest(failure_);
    recv_queue_.push_back(RecvOp{request, data, bytes, tag});
    resume = read_paused_;
    read_paused_ = false;
  }
  if (resume) asio::post(*io_, [self = shared_from_this()] { self->MatchHeader(); });
  return request;
}

void TcpSession::Fail(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return;
    failure_ = reason.ok() ? Status::Aborted(LostMessage("closed")) : reason;
  }
  // Runs inline when already on the io thread (a socket error), else queued behind the handler
  // in progress: buffers of in-flight operations are released only after the socket is closed.
  asio::dispatch(*io_, [self = shared_from_this()] { self->CloseOnIo(); });
}

void TcpSession::WaitClosed() { (void)closed_->Wait(Deadline::Never()); }

void TcpSession::CloseOnIo() {
  if (closed_on_io_) return;
  closed_on_io_ = true;
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);  // cancels the operations in flight: asio no longer touches buffers
  std::deque<SendOp> sends;
  std::deque<RecvOp> recvs;
  Status failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sends.swap(send_queue_);
    recvs.swap(recv_queue_);
    failure = failure_;
  }
  for (SendOp& op : in_flight_) op.request->Complete(failure);
  in_flight_.clear();
  if (active_recv_) active_recv_->request->Complete(failure);
  active_recv_.reset();
  for (SendOp& op : sends) op.request->Complete(failure);
  for (RecvOp& op : recvs) op.request->Complete(failure);
  closed_->Complete(Status::Ok());
}

void TcpSession::OnSocketError(const asio::error_code& ec, const char* doing) {
  if (closed_on_io_) return;  // our own close cancelled the operation
  Status status = Status::RemoteError(LostMessage(Describe(ec) + " (while " + doing + ")"));
  BRAID_LOG(kInfo, rank_) << status.message();
  Fail(status);
}

// ---- send side ----

void TcpSession::StartWrite() {
  if (closed_on_io_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t batch_bytes = 0;
    while (!send_queue_.empty() && in_flight_.size() < kMaxBatchMessages &&
           batch_bytes < kMaxBatchBytes) {
      batch_bytes += send_queue_.front().header.bytes;
      in_flight_.push_back(send_queue_.front());
      send_queue_.pop_front();
    }
    if (in_flight_.empty()) {
      writing_ = false;
      return;
    }
  }
  write_buffers_.clear();
  for (const SendOp& op : in_flight_) {
    write_buffers_.push_back(asio::buffer(&op.header, sizeof(op.header)));
    if (op.header.bytes > 0) write_buffers_.push_back(asio::buffer(op.data, op.header.bytes));
  }
  asio::async_write(socket_, write_buffers_,
                    [self = shared_from_this()](const asio::error_code& ec, size_t) {
                      self->OnWritten(ec);
                    });
}

void TcpSession::OnWritten(const asio::error_code& ec) {
  if (closed_on_io_) return;
  if (ec) return OnSocketError(ec, "sending");
  for (SendOp& op : in_flight_) op.request->Complete(Status::Ok());
  in_flight_.clear();
  StartWrite();
}

// ---- receive side ----

void TcpSession::ReadHeader() {
  if (closed_on_io_) return;
  asio::async_read(socket_, asio::buffer(&read_header_, sizeof(read_header_)),
                   [self = shared_from_this()](const asio::error_code& ec, size_t) {
                     self->OnHeader(ec);
                   });
}

void TcpSession::OnHeader(const asio::error_code& ec) {
  if (closed_on_io_) return;
  if (ec) return OnSocketError(ec, "receiving a message header");
  if (read_header_.magic != kMessageMagic) {
    Status status = Status::RemoteError(
        LostMessage("received a message header with a bad magic (stream out of step)"));
    BRAID_LOG(kWarn, rank_) << status.message();
    return Fail(status);
  }
  MatchHeader();
}

void TcpSession::MatchHeader() {
  if (closed_on_io_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (recv_queue_.empty()) {
      // Stop reading until PostRecv posts a buffer; the payload waits in the kernel.
      read_paused_ = true;
      return;
    }
    active_recv_ = recv_queue_.front();
    recv_queue_.pop_front();
  }
  const RecvOp& recv = *active_recv_;
  if (recv.tag != read_header_.tag || recv.bytes != read_header_.bytes) {
    Status status = Status::Internal(
        "rank " + std::to_string(rank_) + ": receive from rank " + std::to_string(peer_) +
        " expected tag " + std::to_string(recv.tag) + " and " + std::to_string(recv.bytes) +
        " bytes, but the next message has tag " + std::to_string(read_header_.tag) + " and " +
        std::to_string(read_header_.bytes) + " bytes");
    BRAID_LOG(kWarn, rank_) << status.message();
    active_recv_->request->Complete(status);
    active_recv_.reset();
    // Drop that message's payload so the stream stays framed for the receives that follow.
    discard_left_ = read_header_.bytes;
    return Discard();
  }
  if (recv.bytes == 0) return OnPayload(asio::error_code());
  asio::async_read(socket_, asio::buffer(recv.data, recv.bytes),
                   [self = shared_from_this()](const asio::error_code& ec, size_t) {
                     self->OnPayload(ec);
                   });
}

void TcpSession::OnPayload(const asio::error_code& ec) {
  if (closed_on_io_) return;
  if (ec) return OnSocketError(ec, "receiving a message payload");
  active_recv_->request->Complete(Status::Ok());
  active_recv_.reset();
  ReadHeader();
}

void TcpSession::Discard() {
  if (closed_on_io_) return;
  if (discard_left_ == 0) return ReadHeader();
  if (!discard_buffer_) discard_buffer_.reset(new char[kDiscardChunk]);
  size_t chunk = static_cast<size_t>(std::min<uint64_t>(discard_left_, kDiscardChunk));
  asio::async_read(socket_, asio::buffer(discard_buffer_.get(), chunk),
                   [self = shared_from_this()](const asio::error_code& ec, size_t n) {
                     if (self->closed_on_io_) return;
                     if (ec) return self->OnSocketError(ec, "dropping a refused message");
                     self->discard_left_ -= n;
                     self->Discard();
                   });
}

// ---- TcpConnection ----

TcpConnection::TcpConnection(std::shared_ptr<TcpSession> session) : session_(std::move(session)) {}

TcpConnection::~TcpConnection() {
  Close(Status::Aborted("rank " + std::to_string(session_->rank()) + ": connection to rank " +
                        std::to_string(session_->peer()) + " was destroyed"));
}

RequestPtr TcpConnection::PostSend(const void* data, size_t bytes, uint64_t tag) {
  return session_->PostSend(data, bytes, tag);
}

RequestPtr TcpConnection::PostRecv(void* data, size_t bytes, uint64_t tag) {
  return session_->PostRecv(data, bytes, tag);
}

void TcpConnection::Close(const Status& reason) {
  session_->Fail(reason.ok() ? Status::Aborted("rank " + std::to_string(session_->rank()) +
                                               ": connection to rank " +
                                               std::to_string(session_->peer()) + " closed")
                             : reason);
  session_->WaitClosed();
}

}  // namespace braid::transport::tcp
