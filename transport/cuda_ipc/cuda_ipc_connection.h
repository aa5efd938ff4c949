// CudaIpcConnection: one rank's link to a GPU peer on the same host (transport/connection.h's
// contract), moving bytes through device staging rings the peers mapped from each other.
//
// A message, sender S to receiver R:
//   S's host posts a header (tag, size, start) in R's control block, then, as ring space frees
//   up, enqueues on S's send stream: copy a piece (at most kPieceBytes) into R's ring, then
//   WriteValue32(ready, fill cursor). The send completes when S's host reads `ready` past the
//   message: its bytes are in R's memory.
//   R's host matches the header with the receive posted first (tag and size; a mismatch fails the
//   receive and the message is drained unread), and as `ready` shows pieces enqueues on R's
//   receive stream: copy the piece out, then WriteValue32(consumed, drain cursor). The receive
//   completes when R's host reads `consumed` past the message.
// Why no stream ever waits on the peer's flag: the hosts enqueue only what the flags already
// allow, so every enqueued item finishes by itself. A stream blocked on a peer that died would
// need the flag written to be released and would then copy from or into user memory that may be
// gone; here Close and Abort wait (bounded) for the streams to drain before failing requests, so
// no copy touches a caller's buffer after its request failed. Nothing spins on the GPU.
//
// Threads: posting (any thread) queues the request and wakes the transport's progress thread,
// which alone enqueues on this link's streams and completes its requests. Close and a lost peer
// (the link's Unix socket reaches end of file: the peer closed it, exited or was killed) fail
// what is pending. Lock order: the transport's mutex, then a link's mutex_; Request::Complete is
// called with no lock held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/device/device.h"
#include "transport/connection.h"
#include "transport/cuda_ipc/inbox.h"

namespace braid::transport::cuda_ipc {

// Largest piece one stream copy moves: a receiver starts copying out while the sender still
// copies in.
constexpr uint64_t kPieceBytes = uint64_t{1} << 20;

// The state of one link, shared by the Connection the communicator holds and the transport's
// progress thread (either may outlive the other).
class Link {
 public:
  Link(int rank, int peer, int socket, std::shared_ptr<device::Device> device,
       std::unique_ptr<device::Stream> send_stream, std::unique_ptr<device::Stream> recv_stream,
       std::shared_ptr<Inbox> inbox, std::shared_ptr<Inbox> outbox);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peer() const { return peer_; }
  int socket() const { return socket_; }

  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag);
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag);
  Result<std::optional<Connection::Incoming>> Probe();

  // Fails everything pending and later with `reason`, waits (up to 2 s) for the streams, and
  // shuts the socket down so the peer sees end of file. Idempotent (first reason wins).
  void Close(const Status& reason);
  // The socket reached end of file: the peer is gone. What already arrived is still delivered.
  void PeerGone(const std::string& why);

  // Progress thread only: moves what the flags allow. Returns whether anything moved; sets
  // *pending when requests are still outstanding.
  bool Progress(bool* pending);
  bool closed() const;

 private:
  struct SendOp {
    RequestPtr request;
    const uint8_t* src;
    uint64_t bytes;
    uint64_t tag;
    bool headed = false;   // header posted
    uint64_t start = 0;    // fill cursor of its first byte
    uint64_t enqueued = 0;  // bytes enqueued on the send stream
  };
  struct RecvOp {
    RequestPtr request;  // null: a refused message being drained unread
    uint8_t* dst;
    uint64_t bytes;
    uint64_t tag;
    bool matched = false;
    uint64_t start = 0;
    uint64_t enqueued = 0;
  };

  uint64_t ReadReady();      // the sender's fill cursor as published in the outbox (ours)
  uint64_t ReadConsumed();   // the peer's drain cursor of the outbox
  uint64_t ReadIncoming();   // the peer's fill cursor in our inbox
  uint64_t ReadDrained();    // our drain cursor in our inbox, as our stream published it
  // Under mutex_. A failed enqueue sets *stream_error (the link is then closed with it).
  bool ProgressSends(std::vector<std::pair<RequestPtr, Status>>* done, Status* stream_error);
  bool ProgressRecvs(std::vector<std::pair<RequestPtr, Status>>* done, Status* stream_error);
  Status LostStatus() const;
  std::string Named(const std::string& what) const;
  RequestPtr Failed(const Status& status);

  const int rank_;
  const int peer_;
  const int socket_;
  const std::shared_ptr<device::Device> device_;
  const std::shared_ptr<Inbox> inbox_;   // ours: the peer writes, we read
  const std::shared_ptr<Inbox> outbox_;  // the peer's: we write
  // Destroyed before the inboxes (declared after them): their work touches the rings.
  std::unique_ptr<device::Stream> send_stream_;
  std::unique_ptr<device::Stream> recv_stream_;

  mutable std::mutex mutex_;  // guards everything below
  Status failure_;            // Close's reason; pending and later requests fail with it
  bool peer_gone_ = false;
  std::string gone_why_;
  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  uint64_t planned_ = 0;      // fill cursor after the last message whose header is posted
  uint64_t fill_ = 0;         // next fill cursor to enqueue (ours into the outbox)
  uint64_t drain_ = 0;        // next drain cursor to enqueue (ours out of the inbox)
  uint64_t ready_seen_ = 0, consumed_seen_ = 0, incoming_seen_ = 0, drained_seen_ = 0;
};

class CudaIpcConnection : public Connection {
 public:
  explicit CudaIpcConnection(std::shared_ptr<Link> link) : link_(std::move(link)) {}
  ~CudaIpcConnection() override;
  int peer() const override { return link_->peer(); }
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) override;
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) override;
  void Close(const Status& reason) override { link_->Close(reason); }
  Result<std::optional<Incoming>> Probe() override { return link_->Probe(); }
  // Set by the transport: wakes its progress thread after a post.
  void SetWake(std::function<void()> wake) { wake_ = std::move(wake); }

 private:
  std::shared_ptr<Link> link_;
  std::function<void()> wake_;
};

}  // namespace braid::transport::cuda_ipc
