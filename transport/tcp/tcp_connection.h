// TcpChannel / TcpDriver / TcpConnection: the TCP data path. A Connection over one connected,
// handshaken, non-blocking TCP socket.
//
// Why there is no io thread on the data path: completing requests on an io thread and waking the
// waiting thread through a condition variable costs a cross-thread wake-up (~30 us on the 2-core
// development VM) per message, and the io thread competes with the ranks for the cores. Instead,
// as in the shm transport, the thread that posts, tests or waits moves the bytes itself with
// non-blocking sendmsg()/readv() on the socket: requests carry their transport's TcpDriver as
// their RequestDriver, so Request::Test()/Wait() land in TcpDriver::Progress()/Wait().
//
// Why one driver per transport, not per connection: a ring waits on its left neighbour's
// connection while its send to the right neighbour waits for socket space, and the right
// neighbour waits for that send. So whoever drives, drives every connection of the transport that
// has work (posted receives, queued sends). As a backstop for a rank that blocks on something
// other than this transport (another transport, or, for thread ranks in one process, another
// rank's transport), the transport's io thread, which still runs the listener and handshakes,
// checks every millisecond while a send is stalled and pushes if nobody drove since the last
// check (TcpDriver::Backstop).
//
// Waiting (TcpDriver::Wait): spin, then yield, then sleep in poll() on the sockets that have work
// plus an eventfd of the waiter's own (made at its first sleep, closed when the wait ends, so no
// descriptor outlives a wait), with the phase lengths shared with the shm transport (transport/wait_budget.h:
// dedicated when the communicator's ranks fit on the online CPUs, oversubscribed otherwise, so 4-8
// ranks on 2 cores do not starve each other). A thread that completes a request another thread
// may sleep on, Close() and Abort() write the sleepers' eventfds, so every blocked waiter wakes at
// once; a sleeper registers before its last check and a completer checks for sleepers after
// completing (both sequentially consistent), so no wake-up is lost.
//
// On the wire every message is a MessageHeader (magic, tag, bytes) followed by the payload
// (wire.h).
//
// Sending: PostSend writes header and payload with one non-blocking sendmsg straight from the
// caller's buffer when nothing is queued; whatever the kernel does not take is queued, in posting
// order, and pushed (several messages per gather write) by whoever drives next. A send completes
// once its last byte is handed to the kernel.
//
// Receiving: receives match messages in posting order. Small messages are read, several per
// readv, through a 64 KiB staging buffer and copied out; a receive of kDirectRecvBytes or more
// gets its header read on its own and its payload read straight into the caller's buffer (no
// staging copy). Nothing is read while no receive is posted: TCP flow control holds the sender,
// so nothing is buffered beyond the staging buffer. A tag or size mismatch fails the receive with
// kInternalError naming both and drops that message's payload, so the stream stays framed.
//
// Failure: a socket error or end of file fails every pending and future request with
// kRemoteError ("connection to rank P lost: ..."); Close(reason) and Abort do the same with
// `reason`. A peer seen hanging up while this rank waits with nothing posted to it fails that
// link's sends at once (receives still get what it sent before it left). Failing takes both of a
// channel's locks, which every buffer access holds, so once Fail() returns braid no longer touches
// any request's buffer. The descriptor is shut down on failure and closed only when the channel is
// destroyed, so a waiter never polls a reused descriptor number.
//
// Thread safety: posting, testing and waiting from any number of threads. Driving takes each
// side's lock with try_lock, so concurrent waiters never block one another.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "transport/connection.h"
#include "transport/wait_budget.h"
#include "transport/tcp/wire.h"

namespace braid::transport::tcp {


class TcpChannel;

// Drives every channel of one transport. Shared by the transport, its channels and every request
// they made, so it outlives whichever goes first.
class TcpDriver : public RequestDriver {
 public:
  TcpDriver(int rank, WaitBudget budget);
  TcpDriver(const TcpDriver&) = delete;
  TcpDriver& operator=(const TcpDriver&) = delete;

  int rank() const { return rank_; }

  void Add(const std::shared_ptr<TcpChannel>& channel);
  void Remove(const TcpChannel* channel);
  // Fails every channel with `reason` (Abort); wakes every waiter. Each channel says goodbye
  // with `reason`'s message where its stream allows (wire.h).
  void FailAll(const Status& reason);

  // RequestDriver.
  void Progress() override;
  Status Wait(const Request& request, Deadline deadline) override;

  // Wakes the threads sleeping in Wait(), if any (one fence and one load when there are none).
  void WakeSleepers();

  // Backstop (see the head of this file). `kick` is called, from a channel's thread, when a send
  // becomes stalled while the io thread is not checking; the io thread then calls Backstop()
  // every millisecond for as long as it returns true. SetKick({}) before the io thread stops.
  void SetKick(std::function<void()> kick);
  bool Backstop();
  // Channels: a send queue became non-empty (+1) or empty (-1).
  void SendsStalled(int delta);

 private:
  using ChannelList = std::vector<std::shared_ptr<TcpChannel>>;
  std::shared_ptr<const ChannelList> Snapshot() const;
  // Drives every channel with work; true if anything moved.
  bool Poll();
  // Sleeps in poll() on the channels' sockets and the waiter's eventfd `wake_fd` (if >= 0), at
  // most `timeout_ns`.
  void Sleep(int64_t timeout_ns, int wake_fd);

  const int rank_;
  const WaitBudget budget_;

  mutable std::mutex mutex_;                  // guards channels_ (replaced, never changed)
  std::shared_ptr<const ChannelList> channels_;

  std::mutex sleep_mutex_;  // guards sleeper_fds_; a leaf
  std::vector<int> sleeper_fds_;
  std::atomic<int> sleepers_{0};

  std::atomic<uint64_t> drives_{0};  // Poll() calls, for the backstop
  std::atomic<int> stalled_{0};      // channels with a non-empty send queue
  std::atomic<bool> checking_{false};
  uint64_t backstop_seen_ = 0;  // io thread only
  std::mutex kick_mutex_;
  std::function<void()> kick_;
};

class TcpChannel : public std::enable_shared_from_this<TcpChannel> {
 public:
  // `fd`: connected, handshaken, non-blocking; owned (closed on destruction).
  static std::shared_ptr<TcpChannel> Create(int fd, int rank, int peer,
                                            std::shared_ptr<TcpDriver> driver);
  ~TcpChannel();
  TcpChannel(const TcpChannel&) = delete;
  TcpChannel& operator=(const TcpChannel&) = delete;

  int rank() const { return rank_; }
  int peer() const { return peer_; }
  int fd() const { return fd_; }
  const std::shared_ptr<TcpDriver>& driver() const { return driver_; }

  // See Connection. Never block (a post may hand bytes to the kernel); safe from any thread.
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag);
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag);
  // See Connection::Probe. Drives the transport as Progress() does, then, under the receive
  // lock, drops what is left of a refused message and reads at most the rest of the next
  // message's header into the staging buffer (a header may arrive over several calls; none of
  // its payload is read, so a large one still lands straight in its receive's buffer).
  Result<std::optional<Connection::Incoming>> Probe();
  // Fails every pending and future request with `reason` (the first failure wins) and shuts the
  // socket down. Returns once no thread uses any request's buffer. Idempotent. With `goodbye`
  // (a transport abort, i.e. a failure), first tells the peer why (wire.h's goodbye) if no
  // message is half sent.
  void Fail(const Status& reason, bool goodbye = false);

  // For the driver.
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  bool has_recv_work() const { return recv_work_.load(std::memory_order_relaxed) > 0; }
  bool has_send_work() const { return send_work_.load(std::memory_order_relaxed) > 0; }
  // Whether a hang-up of the peer is still worth watching for while idle.
  bool watch_hangup() const { return !hangup_seen_.load(std::memory_order_relaxed); }
  // Moves what can move without blocking (try_lock on each side); true if anything moved.
  bool Drive();
  // poll() reported a hang-up or error while nothing was posted to this channel: with no data
  // left to read the link is gone (every request fails); else only sends fail.
  void OnIdleHangup();

 private:
  struct SendOp {
    RequestPtr request;
    MessageHeader header;
    const char* data;
    size_t offset;  // bytes of header + payload already sent
  };
  struct RecvOp {
    RequestPtr request;
    char* data;
    size_t bytes;
    uint64_t tag;
  };

  TcpChannel(int fd, int rank, int peer, std::shared_ptr<TcpDriver> driver);

  // With send_mutex_ held: writes queued sends until the socket is full. Returns a non-OK status
  // when the socket failed (the caller runs Fail() after unlocking).
  Status PushSendsLocked(bool* moved, bool* completed);
  void UpdateSendStateLocked();
  // With recv_mutex_ held: matches staged and arriving bytes to posted receives until the socket
  // has nothing more. Non-OK when the stream failed (the caller runs Fail() after unlocking).
  Status ProgressRecvLocked(bool* moved, bool* completed);
  void CompleteRecvLocked(RecvOp& op, Status status);

  std::string LostMessage(const std::string& why) const;
  // With recv_mutex_ held and a goodbye `header` at staged_begin_: takes the goodbye's text
  // (staged, then from the socket, waiting at most 200 ms for the rest) and returns the loss it
  // reports.
  Status TakeGoodbyeLocked(const MessageHeader& header);
  Status SocketError(int error, const char* doing) const;
  // Logs and carries out a failure found while driving.
  void FailFromDriving(const Status& status);

  const int fd_;
  const int rank_;
  const int peer_;
  const std::shared_ptr<TcpDriver> driver_;

  // Lock order: send_mutex_ before recv_mutex_ (only Fail() holds both). Neither is held while
  // taking the driver's locks, except WakeSleepers' leaf lock.
  std::mutex send_mutex_;  // guards the send queue, send_failure_, writes to fd_
  std::deque<SendOp> send_queue_;
  Status send_failure_;             // non-OK once sends fail (Fail, or the peer hung up)
  bool send_listed_ = false;        // counted in the driver's stalled sends
  std::atomic<int> send_work_{0};   // queued sends: hint for lock-free Drive()

  std::mutex recv_mutex_;  // guards the fields below and reads from fd_
  std::deque<RecvOp> recv_queue_;
  RecvOp active_{};             // the receive whose payload is arriving (request set if any)
  size_t active_got_ = 0;
  uint64_t discard_left_ = 0;   // payload bytes of a refused message still to drop
  std::unique_ptr<char[]> staging_;
  size_t staged_begin_ = 0;     // unparsed bytes are staging_[staged_begin_, staged_end_)
  size_t staged_end_ = 0;
  Status recv_failure_;
  std::atomic<int> recv_work_{0};  // receives posted and not done

  std::atomic<bool> failed_{false};
  std::atomic<bool> hangup_seen_{false};
};

// The Connection handed to algorithms. Destroying it closes the link (pending requests fail with
// kAborted); the peer sees end of file.
class TcpConnection : public Connection {
 public:
  explicit TcpConnection(std::shared_ptr<TcpChannel> channel);
  ~TcpConnection() override;
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  int peer() const override { return channel_->peer(); }
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) override;
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) override;
  Result<std::optional<Incoming>> Probe() override;
  // Fails pending requests with `reason` (kAborted if `reason` is OK) and closes the socket;
  // returns once no buffer is in use. Idempotent.
  void Close(const Status& reason) override;

 private:
  std::shared_ptr<TcpChannel> channel_;
};

}  // namespace braid::transport::tcp
