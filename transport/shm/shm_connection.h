// ShmChannel / ShmConnection: a Connection between two ranks of one host through a shared
// segment (see segment.h) holding one ring per direction (see ring.h).
//
// Why there is no io thread: a helper thread per connection would cost a thread hand-off (a
// wake-up, ~30 us on the development VM) per message and compete with the ranks for the cores.
// Instead the thread that posts, tests or waits moves the data itself: requests carry the channel
// as their RequestDriver, so Request::Test()/Wait() land in Progress()/Wait() here.
//
// Sending: PostSend writes the message into the outgoing ring at once when it fits, and then
// returns an already-completed request (no allocation). Large messages may go as a remote
// descriptor (address + sequence number) instead: the receiver copies straight from the sender's
// buffer, one copy instead of two, and publishes remote_done, which completes the send. That is
// done from ChannelSetup::remote_min_bytes up, which the transport sets per pair from
// measurements (shm_transport.h: memcpy between thread ranks wins; process_vm_readv loses to
// the cache-resident ring on the development VM). Otherwise large messages stream through the
// ring in pieces of up to a quarter of it, sender and receiver copying at the same time on two
// cores. Sends that find no room wait in a queue, in posting order, and the channel joins the
// transport's StalledSends list: any thread waiting on any connection of the transport pushes
// them, and the control thread does (then driven by the consumer's doorbell) when nobody has for
// a millisecond -- a rank blocked on another transport still drains its shm sends (TCP's io
// thread keeps the same 1 ms safety net for its stuck sends).
//
// Receiving: receives match ring records in posting order; a tag or size mismatch fails the
// receive with kInternalError naming both and drops that message (acknowledging it if remote),
// so the stream stays in step. Messages wait in the ring until a receive is posted (the ring's
// back-pressure holds the sender), so nothing is ever buffered twice.
//
// Failure: Fail() (Close, Abort, transport destruction) fails every pending request, marks the
// outgoing direction abandoned (so the peer never trusts a descriptor into buffers the caller got
// back) and shuts the socket down, which the peer sees as end of file. When the peer's socket
// reaches end of file (it closed, exited or was killed), sends fail at once with kRemoteError
// "connection to rank P lost"; receives still get what is already in the ring, then fail the same
// way.
//
// Thread safety: posting, testing and waiting from any number of threads. Progress takes each
// side's lock with try_lock, so concurrent waiters never block one another; one of them moves
// the data while the others poll their request.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/base/deadline.h"
#include "core/base/light_lock.h"
#include "core/base/status.h"
#include "transport/connection.h"
#include "transport/request_pool.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"
#include "transport/shm/stalled_sends.h"
#include "transport/shm/wait.h"

namespace braid::transport::shm {

// The largest message SendRecv moves without requests. Such a message is one ring record and
// one copy on each side either way; above it the posted path streams pieces of a quarter ring,
// the two sides copying at once.
constexpr size_t kWholeMessageBytes = 4096;

// What a finished handshake hands to a channel.
struct ChannelSetup {
  int rank = -1;
  int peer = -1;
  int side = 0;     // 0: this rank dialed (lower rank), 1: it accepted
  int socket = -1;  // connected Unix socket; the channel owns it
  Segment segment;
  uint64_t remote_min_bytes = UINT64_MAX;  // remote descriptors from this size up (if allowed)
  bool peer_reads_us = false;              // our large sends may go as remote descriptors
  bool we_read_peer = false;  // the peer's remote descriptors can be copied (else: fail them)
  bool same_process = false;  // copy with memcpy instead of process_vm_readv
  pid_t peer_pid = -1;
  std::shared_ptr<StalledSends> stalled;             // the transport's list (never null)
  WaitBudget budget = WaitBudget::Oversubscribed();  // how Wait() spins, yields and sleeps
};

class ShmChannel : public RequestDriver, public std::enable_shared_from_this<ShmChannel> {
 public:
  static std::shared_ptr<ShmChannel> Create(ChannelSetup setup);
  ~ShmChannel() override;
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // This rank, the peer's rank, and the connected Unix socket (owned; closed on destruction).
  int rank() const { return rank_; }
  int peer() const { return peer_; }
  int socket() const { return socket_; }
  // "memcpy", "process_vm_readv" or "ring": how large messages travel from this side.
  const char* large_message_path() const;

  // See Connection. Never block (a post may copy a message into or out of the ring); safe from
  // any thread.
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag);
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag);
  // See Connection::PostRecvInto: ring pieces are handed to `sink` straight out of the ring as
  // they land (every piece but a message's last a multiple of 64 bytes); a message sent by
  // reference from the peer's buffer in this process in one piece, from another process through
  // a 64 KiB bounce buffer.
  RequestPtr PostRecvInto(size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink);
  // The request-free path of Connection::SendRecv for messages of at most kWholeMessageBytes
  // (ShmConnection::SendRecv). SendWhole writes the message as one ring record (a line up to
  // 32 bytes), as PostSend does when the ring has room, and returns false having done nothing
  // where PostSend would queue it, send it by reference or fail it. ReceiveWhole spins
  // (dedicated budget; one look when oversubscribed) until the next message is in the ring and
  // lands it if it is this one, whole in one record, as PostRecv's fast path does; false, having
  // taken nothing, when it is late, something else comes first or a receive is already posted:
  // the caller then posts the receive and waits, which handles every other case.
  bool SendWhole(const void* data, size_t bytes, uint64_t tag);
  bool ReceiveWhole(void* data, size_t bytes, uint64_t tag);
  // See Connection::Probe. Pushes stalled sends as Progress() does, then, under the receive
  // lock, moves past what ProgressRecvLocked would (pads, the rest of a refused message) and
  // reads the header of the record at the ring's tail: a message's first record (kStart or
  // kRemote) carries its tag and total size, however many pieces follow or whether it comes by
  // reference. Consumes nothing of the message itself.
  Result<std::optional<Connection::Incoming>> Probe();
  // See Connection::ReadsPeerMemory / ReadPeerMemory: process_vm_readv from a peer process whose
  // handshake probe passed; never for a thread of this process (memcpy from a buffer whose owner
  // may free it when its operation fails is not safe without the ring's hand-over). The copy runs
  // on the calling thread under no lock; afterwards, as CopyRemote, a peer that abandoned the
  // link or hung up meanwhile fails the read (its bytes are not to be trusted).
  bool reads_peer_memory() const { return we_read_peer_ && !same_process_; }
  Status ReadPeer(uint64_t address, void* destination, uint64_t bytes);
  // Fails every pending and future request with `reason`, abandons the outgoing direction and
  // shuts the socket down. Returns once no thread of this process uses any request's buffer
  // (and, for a peer in this process, once it no longer copies from ours). Idempotent: the first
  // reason wins. With `goodbye` (a transport abort, i.e. a failure), first tells the peer why
  // over the socket (wire.h's kGoodbye).
  void Fail(const Status& reason, bool goodbye = false);
  // True once Fail() ran or the peer is gone: the control thread stops watching the socket.
  bool finished() const { return failed_.load() || peer_gone_.load(); }

  // Control thread: the socket reached end of file or an error. Fails sends now and receives
  // once the ring is drained, with kRemoteError `reason`.
  void OnPeerGone(const Status& reason);
  // Control thread: the peer's goodbye text (wire.h), kept for the loss it will report.
  std::string& goodbye() { return goodbye_; }
  // Control thread: the consumer freed ring space we asked to hear about; pushes queued sends
  // and asks for the next doorbell while some remain.
  void OnDoorbell();
  // Control thread, every millisecond while this channel is stalled: if nobody pushed its sends
  // since the last call, pushes them and switches to doorbells.
  void Backstop();
  // Pushes queued sends unless another thread holds the send lock; true if anything moved.
  bool TryPushSends();

  // RequestDriver: lock-free when there is nothing to do.
  void Progress() override;
  // Spins, then yields, then sleeps on this side's futex (wait.h); wakes on any event of this
  // connection, Fail(), Abort() and peer loss.
  Status Wait(const Request& request, Deadline deadline) override;

 private:
  struct SendOp {
    RequestPtr request;  // null while the op has not left PostSend's fast path
    const char* data;
    uint64_t bytes;
    uint64_t tag;
    uint64_t offset;  // payload bytes already in the ring
    bool started;     // its kStart record is in the ring
  };
  struct RemoteSend {
    uint64_t sequence;  // completes once remote_done passes it
    const char* data;
    RequestPtr request;
  };
  struct RecvOp {
    RequestPtr request;
    char* data;  // where the message goes, unless `sink` takes it
    uint64_t bytes;
    uint64_t tag;
    std::shared_ptr<LandingSink> sink{};  // PostRecvInto: gets the pieces where they landed
  };
  enum class Push { kDone, kRemote, kStalled };

  explicit ShmChannel(ChannelSetup setup);

  // All of these run with send_lock_ held.
  Push PushSend(SendOp& op);
  // Completes acknowledged remote sends and pushes queued sends. Returns whether anything moved;
  // `*completed` (if given) whether a request completed.
  bool ProgressSendLocked(bool* completed);
  // Keeps send_work_ and the StalledSends listing in step with the queues.
  void UpdateSendStateLocked();
  // Asks the consumer for a doorbell after it frees space, then pushes once more in case it
  // freed some before it could see the request.
  void ArmDoorbellLocked();
  // Fails queued sends and remote sends the peer has not copied yet; every later send fails
  // with `reason`. No-op once sends have failed.
  void FailSendsLocked(const Status& reason);
  // If the receive side found the link lost, fails the sends with its reason; true if so.
  bool AdoptLinkLossLocked();

  // With recv_lock_ held. Matches ring records to posted receives; true if anything moved.
  bool ProgressRecvLocked();
  // Progress() that says whether anything moved (Wait() restarts its spin phase then).
  bool Poll();
  // Copies a message sent by reference into op's buffer (or hands it to op's sink).
  Status CopyRemote(const RecvOp& op, uint64_t address, uint64_t bytes);
  // After a copy out of the peer's process (CopyRemote, ReadPeer): `error` (the copy's, "" if
  // none) naming `buffer`, address and length, else whether the peer abandoned the link
  // (`abandoned`) or hung up (`went_away`) meanwhile, which makes the copied bytes untrustworthy.
  Status CheckCopyFromPeer(const std::string& error, const char* buffer, uint64_t address,
                           uint64_t bytes, const char* abandoned, const char* went_away) const;
  void FailReceivesLocked(const Status& status);
  // Whether `record` (from Peek, may be null) is the whole of a message tagged `tag` of `bytes`
  // bytes: what a receive may land at once, without queueing (PostReceive, ReceiveWhole).
  static bool IsWholeMessage(const RecordHeader* record, uint64_t tag, uint64_t bytes);
  // With recv_lock_ held, after landing `record`: moves past it and tells the producer.
  void ConsumeLocked(const RecordHeader* record);
  // PostRecv and PostRecvInto: the fast path, else queues the receive.
  RequestPtr PostReceive(RecvOp op);
  // Puts `length` message bytes at `offset` of `op`'s buffer, or hands them to its sink.
  static void Land(const RecvOp& op, uint64_t offset, const char* bytes, uint64_t length);
  // The receive side found the link broken: sends fail from their next step, the peer is told.
  void NoteLinkLostLocked(const Status& reason);
  std::string MismatchMessage(uint64_t want_tag, uint64_t want_bytes, uint64_t tag,
                              uint64_t bytes) const;
  std::string LostMessage(const std::string& why) const;
  bool SocketHungUp() const;

  // A pending request driven by this channel, recycled from `pool` when one is free; with the
  // lock of the side that owns `pool` held.
  RequestPtr NewRequest(RequestPool& pool);

  void WakeSelf();
  void WakePeer();
  // Wakes `side`'s sleepers, if any; the caller has just run a sequentially consistent fence.
  void WakeSleepersFenced(SideControl* side);
  // recv_work_ += delta, with recv_lock_ held.
  void AddRecvWorkLocked(int delta);
  // After consuming: if the producer asked for a doorbell, ring it (one byte on the socket).
  void RingDoorbellIfAsked();

  const int rank_;
  const int peer_;
  const int side_;
  const int socket_;
  std::string goodbye_;  // the peer's goodbye text, if it sent one; the control thread's only
  Segment segment_;
  SideControl* const own_;
  SideControl* const other_;
  RingControl* const out_;
  RingControl* const in_;
  char* const in_data_;
  const uint64_t ring_bytes_;
  const uint64_t remote_min_bytes_;
  const bool peer_reads_us_;
  const bool we_read_peer_;
  const bool same_process_;
  const pid_t peer_pid_;
  const std::shared_ptr<StalledSends> stalled_;
  const WaitBudget budget_;
  // Returned by every post that finishes on the spot, so most small messages cost no allocation
  // and no reference counting (CompletedOkRequest in the .cc). Kept per channel rather than
  // fetched from a function-local static or a thread_local, which cost an initialisation check on
  // every access.
  const RequestPtr done_;

  // Lock order: send_lock_ before recv_lock_ (only Fail() holds both). Neither is held while
  // taking a transport lock. Progress() only try_locks them.
  LightLock send_lock_;  // guards the producer side: writer_, the send queues, send_failure_,
                           // send_pool_
  RingWriter writer_;
  std::deque<SendOp> send_queue_;        // not yet (fully) in the ring
  std::deque<RemoteSend> remote_sends_;  // descriptors in the ring, awaiting remote_done
  uint64_t remote_next_ = 0;
  Status send_failure_;
  std::atomic<bool> listed_{false};  // in stalled_ (queue not empty); written under send_lock_
  bool doorbell_mode_ = false;       // the control thread took over pushing (see Backstop)
  std::atomic<int> send_work_{0};    // queued + remote outstanding: hint for lock-free Progress()
  std::atomic<uint64_t> pushes_{0};  // records pushed so far (Backstop's progress check)
  uint64_t backstop_seen_ = 0;       // control thread only
  RequestPool send_pool_;            // requests of sends that did not finish in PostSend

  LightLock recv_lock_;  // guards the consumer side: reader_, the receive queue, active_,
                           // recv_pool_
  RingReader reader_;
  std::deque<RecvOp> recv_queue_;
  RecvOp active_{};  // the message whose pieces are arriving (request set if any)
  uint64_t active_offset_ = 0;
  uint64_t discard_left_ = 0;  // bytes of a refused message still to drop
  bool discarding_ = false;
  uint64_t remote_acked_ = 0;
  Status recv_failure_;
  std::atomic<int> recv_work_{0};  // receives posted and not done: hint for Progress()
  RequestPool recv_pool_;          // requests of receives that did not finish in PostReceive
  std::atomic<bool> link_lost_{false};  // set once under recv_lock_, read by the send side
  Status link_lost_status_;             // written once before link_lost_ is set (release)

  std::atomic<bool> failed_{false};
  std::atomic<bool> peer_gone_{false};
  Status peer_gone_status_;  // written once before peer_gone_ is set (release), read after
};

// The Connection handed to algorithms. Destroying it closes the link (pending requests fail with
// kAborted); the peer sees end of file.
class ShmConnection : public Connection {
 public:
  explicit ShmConnection(std::shared_ptr<ShmChannel> channel);
  ~ShmConnection() override;
  ShmConnection(const ShmConnection&) = delete;
  ShmConnection& operator=(const ShmConnection&) = delete;

  int peer() const override { return channel_->peer(); }
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) override;
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) override;
  bool LandsInPlace() const override { return true; }
  // Halves of up to kWholeMessageBytes go through ShmChannel::SendWhole/ReceiveWhole, the rest
  // through requests.
  Status SendRecv(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, uint64_t tag,
                  Deadline deadline, Half* failed) override;
  RequestPtr PostRecvInto(size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink) override;
  Result<std::optional<Incoming>> Probe() override;
  bool ReadsPeerMemory() const override;
  Status ReadPeerMemory(uint64_t address, void* destination, size_t bytes) override;
  // Fails pending requests with `reason` (kAborted if `reason` is OK) and closes the link;
  // returns once no buffer is in use. Idempotent.
  void Close(const Status& reason) override;

 private:
  std::shared_ptr<ShmChannel> channel_;
};

}  // namespace braid::transport::shm
