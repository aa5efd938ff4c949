// TcpConnection: a Connection over one TCP socket, driven by its transport's io thread.
//
// On the wire every message is a MessageHeader (magic, tag, bytes) followed by the payload.
//
// Sending: PostSend queues the message; one write chain per connection sends queued messages in
// posting order, several at a time with one gather write (headers and payloads straight from the
// caller's buffers), and completes each request once its payload is handed to the kernel.
//
// Receiving: the io thread reads a header, then reads the payload directly into the buffer of the
// oldest posted receive (no staging copy). When no receive is posted it stops reading; TCP flow
// control then holds the sender back, so the io thread never blocks and never buffers payloads.
//
// Failure: a socket error or EOF fails every pending and future request with kRemoteError
// ("connection to rank P lost: ..."); Close(reason) does the same with `reason`. Requests are
// failed on the io thread right after it closed the socket, so once a request has completed,
// braid no longer touches its buffer.
#pragma once

#include <asio.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/status.h"
#include "transport/connection.h"
#include "transport/tcp/wire.h"

namespace braid::transport::tcp {

// The asio side of one connection. Shared by the TcpConnection handle, the handlers in flight and
// (weakly) the transport, so whichever of connection and transport goes first, nothing dangles.
// Internal to the tcp transport.
class TcpSession : public std::enable_shared_from_this<TcpSession> {
 public:
  // `socket` is connected and handshaken; its handlers run on the single thread running `io`.
  static std::shared_ptr<TcpSession> Create(std::shared_ptr<asio::io_context> io,
                                            asio::ip::tcp::socket socket, int rank, int peer);
  TcpSession(const TcpSession&) = delete;
  TcpSession& operator=(const TcpSession&) = delete;

  int rank() const { return rank_; }
  int peer() const { return peer_; }

  // Starts the receive side. Call once, after Create.
  void Start();
  // See Connection. Never block; safe from any thread.
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag);
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag);
  // Fails every pending and future request with `reason` (the first failure wins) and closes the
  // socket. Returns at once; the io thread completes the requests a moment later.
  void Fail(const Status& reason);
  // Blocks until a Fail has been carried out on the io thread. Must not run on the io thread.
  void WaitClosed();

 private:
  struct SendOp {
    RequestPtr request;
    MessageHeader header;
    const void* data;
    size_t offset;  // bytes of header + payload already sent (by a direct send)
  };
  struct RecvOp {
    RequestPtr request;
    void* data;
    size_t bytes;
    uint64_t tag;
  };

  TcpSession(std::shared_ptr<asio::io_context> io, asio::ip::tcp::socket socket, int rank,
             int peer);

  // A small send posted while nothing else is being sent is written by the posting thread
  // itself (one non-blocking sendmsg), saving the hand-off to the io thread; whatever the kernel
  // does not take goes to the io thread's write chain.
  RequestPtr DirectSend(RequestPtr request, const void* data, size_t bytes, uint64_t tag);

  // All of these run on the io thread.
  void StartWrite();
  void OnWritten(const asio::error_code& ec);
  void ReadHeader();
  void OnHeader(const asio::error_code& ec);
  void MatchHeader();
  void OnPayload(const asio::error_code& ec);
  void Discard();
  void OnSocketError(const asio::error_code& ec, const char* doing);
  void CloseOnIo();

  std::string LostMessage(const std::string& why) const;

  // Declared before socket_ so that the socket is destroyed while its io_context still exists.
  std::shared_ptr<asio::io_context> io_;
  asio::ip::tcp::socket socket_;
  const int rank_;
  const int peer_;
  const int fd_;  // socket_'s descriptor, for direct sends

  // Held by a direct send while it uses fd_, and by CloseOnIo while it closes the socket, so that
  // a direct send never writes to a descriptor number that was closed (and maybe reused). Never
  // held together with mutex_.
  std::mutex fd_mutex_;
  bool fd_open_ = true;

  // Guards the fields below. Never held while calling into asio or completing a request; a
  // leaf lock (the transport's mutex may be held when taking it, never the reverse).
  std::mutex mutex_;
  std::deque<SendOp> send_queue_;
  std::deque<RecvOp> recv_queue_;
  Status failure_;           // non-OK once failed; then the queues stay empty
  bool writing_ = false;     // a write chain is running or about to
  bool read_paused_ = false; // a header waits in read_header_ for a receive to be posted

  // io thread only.
  bool closed_on_io_ = false;
  std::vector<SendOp> in_flight_;
  std::vector<asio::const_buffer> write_buffers_;
  MessageHeader read_header_;
  std::optional<RecvOp> active_recv_;
  uint64_t discard_left_ = 0;
  std::unique_ptr<char[]> discard_buffer_;

  // Completed once CloseOnIo ran: every request is finished and no buffer is in use.
  RequestPtr closed_ = std::make_shared<Request>();
};

// The Connection handed to algorithms. Destroying it closes the link (pending requests fail with
// kAborted) and waits until braid no longer uses any of their buffers.
class TcpConnection : public Connection {
 public:
  explicit TcpConnection(std::shared_ptr<TcpSession> session);
  ~TcpConnection() override;
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  int peer() const override { return session_->peer(); }
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) override;
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) override;
  // Fails pending requests with `reason` (kAborted if `reason` is OK) and closes the socket;
  // returns once the io thread has released every buffer. Idempotent.
  void Close(const Status& reason) override;

 private:
  std::shared_ptr<TcpSession> session_;
};

}  // namespace braid::transport::tcp
