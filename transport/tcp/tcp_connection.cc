#include "transport/tcp/tcp_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

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
// Sends up to this size may be written by the posting thread (see DirectSend). Larger ones go
// to the io thread, so that the poster is not held up copying them into the kernel.
constexpr size_t kMaxDirectSendBytes = size_t{64} << 10;

// asio's transfer_all() caps each read/write syscall at 64 KiB; for large payloads that costs
// a trip through the io loop per 64 KiB. Let the kernel move as much as it can per syscall.
struct TransferAll {
  size_t operator()(const asio::error_code& ec, size_t /*done*/) const {
    return ec ? 0 : size_t{1} << 30;
  }
};

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
    : io_(std::move(io)),
      socket_(std::move(socket)),
      rank_(rank),
      peer_(peer),
      fd_(socket_.native_handle()) {}

void TcpSession::Start() {
  asio::post(*io_, [self = shared_from_this()] { self->ReadHeader(); });
}

std::string TcpSession::LostMessage(const std::string& why) const {
  return "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer_) +
         " lost: " + why;
}

RequestPtr TcpSession::PostSend(const void* data, size_t bytes, uint64_t tag) {
  auto request = std::make_shared<Request>();
  bool direct = false;
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return FailedRequest(failure_);
    if (!writing_ && bytes <= kMaxDirectSendBytes) {
      direct = true;  // nothing queued or in flight: this send goes first, from this thread
    } else {
      SendOp op{request, MessageHeader{}, data, 0};
      op.header.tag = tag;
      op.header.bytes = bytes;
      send_queue_.push_back(op);
      start = !writing_;
    }
    writing_ = true;
  }
  if (direct) return DirectSend(std::move(request), data, bytes, tag);
  if (start) asio::post(*io_, [self = shared_from_this()] { self->StartWrite(); });
  return request;
}

RequestPtr TcpSession::DirectSend(RequestPtr request, const void* data, size_t bytes,
                                  uint64_t tag) {
  SendOp op{request, MessageHeader{}, data, 0};
  op.header.tag = tag;
  op.header.bytes = bytes;
  const size_t total = sizeof(op.header) + bytes;
  ssize_t sent = -1;
  {
    std::lock_guard<std::mutex> lock(fd_mutex_);
    if (fd_open_) {
      struct iovec iov[2];
      iov[0].iov_base = &op.header;
      iov[0].iov_len = sizeof(op.header);
      iov[1].iov_base = const_cast<void*>(data);
      iov[1].iov_len = bytes;
      struct msghdr msg = {};
      msg.msg_iov = iov;
      msg.msg_iovlen = bytes > 0 ? 2 : 1;
      sent = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }
  const bool complete = sent == static_cast<ssize_t>(total);
  bool start = false;
  Status failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure = failure_;
    if (!failure.ok()) {
      // Failed meanwhile: CloseOnIo has drained or will drain the queue without this send.
    } else if (complete) {
      start = !send_queue_.empty();  // others queued behind this send: the io thread goes on
      writing_ = start;
    } else {
      // Socket buffer full, partial write, or an error the io thread's write will report:
      // the rest goes first on the io thread's chain.
      op.offset = sent > 0 ? static_cast<size_t>(sent) : 0;
      send_queue_.push_front(op);
      start = true;
    }
  }
  if (!failure.ok()) {
    request->Complete(complete ? Status::Ok() : failure);
  } else if (complete) {
    request->Complete(Status::Ok());
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
  {
    std::lock_guard<std::mutex> lock(fd_mutex_);  // waits out a direct send in progress
    fd_open_ = false;
    asio::error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);  // cancels the operations in flight: asio no longer touches buffers
  }
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
    // Only the first op can have an offset (what a direct send left over).
    size_t skip = op.offset;
    if (skip < sizeof(op.header)) {
      write_buffers_.push_back(
          asio::buffer(reinterpret_cast<const char*>(&op.header) + skip, sizeof(op.header) - skip));
      skip = 0;
    } else {
      skip -= sizeof(op.header);
    }
    if (op.header.bytes > skip) {
      write_buffers_.push_back(
          asio::buffer(static_cast<const char*>(op.data) + skip, op.header.bytes - skip));
    }
  }
  asio::async_write(socket_, write_buffers_, TransferAll(),
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
  asio::async_read(socket_, asio::buffer(recv.data, recv.bytes), TransferAll(),
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
  asio::async_read(socket_, asio::buffer(discard_buffer_.get(), chunk), TransferAll(),
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
