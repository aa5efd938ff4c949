// Connection: one rank's link to one peer, as algorithms see it. Algorithms never learn which
// transport (TCP, shared memory, verbs, CUDA IPC) is underneath.
//
// Contract:
// - PostSend/PostRecv never block; they return a Request that completes later.
// - Sends on one connection arrive in posting order; receives match them in posting order. A
//   receive must carry the same tag and byte count as the send it matches: a mismatch fails
//   the receive with Code::kInternalError naming both (tags carry sequence number and step, so
//   ranks that disagree about the schedule fail loudly instead of mixing data).
// - Buffers belong to the caller and must stay valid (and, for sends, unchanged) until the
//   request completes.
// - A lost peer fails every pending and future request with Code::kRemoteError naming the peer.
// - Thread safety: posting from several threads at once is allowed; completion may be observed
//   from any thread.
// - A connection moves bytes only: it knows no datatype, reduction or collective. A consumer
//   that wants to work on a message where it landed (a reduction straight out of a shared-memory
//   ring) posts PostRecvInto with a LandingSink of its own layer (algorithms/reduce_sink.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "core/base/deadline.h"
#include "core/base/status.h"

namespace braid::transport {

// What a receive posted with Connection::PostRecvInto hands its message to, piece by piece, as
// the pieces land in the transport's own memory (a shared-memory ring, a peer's buffer, a
// staging buffer). Why: an algorithm that combines a message with its own data (a reduction)
// would otherwise receive it into scratch and then read it again; reading it where it landed
// saves that pass and overlaps the work with the transfer, as NCCL's primitives read straight
// from a peer's FIFO. The consumer's work belongs to the layer above (algorithms reduce,
// later on a device), so the transport only says where the bytes are.
//
// Contract of Land(offset, data, length), for one message of `bytes` bytes:
// - Pieces come in message order and tile it exactly: the first at offset 0, each next one at
//   the previous offset + length, the lengths summing to `bytes`; every byte is handed over
//   exactly once. length > 0 always (a 0-byte message calls nothing). Pieces may have any
//   length: a consumer of multi-byte elements must carry a split element to the next piece
//   (algorithms/reduce_sink.h does).
// - `data` is valid for reading only during the call, and only [data, data + length).
// - Called on whichever thread makes the connection progress (the poster, a waiter, a tester, a
//   transport's own thread), at most one call at a time per receive, every call before the
//   receive's request completes (so its writes are visible to whoever sees the request done)
//   and none after. It must not block and must not call into this connection (the transport
//   may hold its receive lock).
// - A receive that fails (mismatch, lost link, abort) may have handed over some pieces or none.
class LandingSink {
 public:
  virtual ~LandingSink() = default;
  virtual void Land(size_t offset, const void* data, size_t length) = 0;
};

class Request;

// For transports whose data moves on the thread that tests or waits (shared memory and TCP: there
// is no io thread on the data path, the waiting rank moves the bytes itself). A request built
// with a driver calls it from Test() and Wait(); requests without one are completed by whoever
// calls Complete() and wake their waiters through a condition variable.
class RequestDriver {
 public:
  virtual ~RequestDriver() = default;
  // Moves whatever can move now without blocking (may complete this or other requests).
  // Called by Test() of a pending request; safe from any thread.
  virtual void Progress() = 0;
  // Blocks until `request` is done or `deadline` passes, making progress meanwhile; returns the
  // request's status, or Code::kTimeout leaving it pending. Safe from any thread.
  virtual Status Wait(const Request& request, Deadline deadline) = 0;
};

// A posted send or receive. Transports call Complete() exactly once; users Test() or Wait().
class Request {
 public:
  Request() = default;
  // A request whose Test() and Wait() are carried out by `driver` (see RequestDriver). Complete()
  // then wakes nobody: the driver's waiters poll IsDone() and the driver wakes its own sleepers.
  explicit Request(std::shared_ptr<RequestDriver> driver) : driver_(std::move(driver)) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Non-blocking: true once the request finished, successfully or not. With a driver, first
  // lets it make progress.
  bool Test() const {
    if (IsDone()) return true;
    if (driver_ == nullptr) return false;
    driver_->Progress();
    return IsDone();
  }
  // Blocks until the request finished or `deadline` passed. After a short spin (the peer is often
  // about to answer) it sleeps on a condition variable (with a driver: as the driver decides). On
  // expiry it returns Code::kTimeout and the request stays pending.
  Status Wait(Deadline deadline);
  // Valid once Test() is true.
  const Status& status() const { return status_; }
  // Whether Complete() has run; never makes progress (for drivers).
  bool IsDone() const { return done_.load(std::memory_order_acquire); }

  // For transports: records the outcome and wakes waiters. Later calls are ignored.
  void Complete(Status status);
  // For request pools (transport/request_pool.h): makes a finished request pending again, as if
  // new, keeping its driver. Only while nobody else can reach it (the pool holds the only
  // reference), so no reader sees the old status or a half-reset request.
  void Reset();

 private:
  const std::shared_ptr<RequestDriver> driver_;  // null for requests completed by another thread
  std::mutex mutex_;  // guards status_ writes and the condition variable (driverless requests)
  std::condition_variable done_cv_;
  std::atomic<bool> claimed_{false};  // driven requests: the first Complete() claims it
  std::atomic<bool> done_{false};
  Status status_;
};

using RequestPtr = std::shared_ptr<Request>;

class Connection {
 public:
  virtual ~Connection() = default;

  // The peer's rank in the communicator.
  virtual int peer() const = 0;
  // Sends `bytes` bytes from `data` tagged `tag`. Non-blocking.
  virtual RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) = 0;
  // Receives exactly `bytes` bytes into `data` from the next send, which must carry `tag`.
  virtual RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) = 0;
  // Fails every pending request with `reason` and releases the link. Idempotent.
  virtual void Close(const Status& reason) = 0;

  // Whether PostRecvInto hands over pieces where they landed in the transport's own memory
  // (shared memory: ring pieces and the peer's buffer) rather than staging the whole message
  // first. Algorithms consume in place where this is true and otherwise receive into their own
  // scratch and work from there, which is cheaper than the default PostRecvInto's staging.
  virtual bool LandsInPlace() const { return false; }
  // Receives the next message, which must carry `tag` and `bytes` bytes (as PostRecv), handing
  // it to `sink` (see LandingSink) instead of copying it into a buffer of the caller's.
  // - Blocking: never, as PostRecv; pieces may be handed over during this call already.
  // - Ownership: the connection holds `sink` until it will call it no more (the request is done,
  //   or the link is closed); a failed collective may leave the request pending until the
  //   communicator breaks its links, so the sink must not live on a caller's stack.
  // - Ordering, tags, mismatches and errors: as PostRecv (a refused message hands nothing over).
  // This default, for transports without landed memory to show (tcp), receives the message whole
  // into a staging buffer with PostRecv and hands it over in one piece when the receive is tested
  // or waited on and found complete.
  virtual RequestPtr PostRecvInto(size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink);

  // Which half of a SendRecv failed.
  enum class Half { kSend, kReceive };
  // Sends `send_bytes` from `send` and receives `recv_bytes` into `recv` from the peer, both as
  // message `tag`, and returns once both completed or one failed (then `*failed` says which);
  // a zero-byte half is skipped. The same contract as posting the send, then the receive, and
  // waiting for both, which is what this default does. It moves bytes only: the caller reduces
  // afterwards (recursive doubling's exchange) -- a small message is one copy out of the ring
  // either way, so there is nothing to gain from consuming it in place.
  // Why a call of its own: one such exchange is the whole of a small allreduce's step, and a
  // transport can do it without requests (shm: a line into the ring, then a spin on the
  // incoming ring). On shm that took the exchange of a 2-rank 8-byte allreduce from ~770
  // instructions (posts, a pooled request, the progress loop) to ~330 (docs/PERFORMANCE.md).
  virtual Status SendRecv(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                          uint64_t tag, Deadline deadline, Half* failed);

  // What Probe saw of the next incoming message: its tag and byte count.
  struct Incoming {
    uint64_t tag = 0;
    size_t bytes = 0;
  };
  // Looks at the next incoming message without receiving it: once it has arrived (at least its
  // header), returns its tag and byte count; std::nullopt while nothing has arrived yet. The
  // message stays where it is, for the next PostRecv (which must still carry its tag and size).
  // Why: a receive from whichever peer sends first (braidRecvAny, MPI_ANY_SOURCE) polls every
  // peer's connection and posts a receive only on the one whose message has come; the caller
  // compares the tag with the one it expects (another tag is not an error here: a peer may
  // already have moved on to a collective's messages).
  // - Blocking: never; it makes progress as Test() does (on shm and tcp the calling thread moves
  //   bytes, pushes stalled sends, and reads at most the next message's header, never a byte
  //   beyond it, so a large payload still lands straight in the receive posted for it).
  // - Only while no receive is pending on this connection: with one pending, the next message is
  //   that receive's, and Probe fails with kInternalError.
  // - Ownership: nothing is taken or kept; the message is neither consumed nor copied out.
  // - Thread safety: as posting (any thread), but answers are only meaningful to a thread that
  //   also owns the receives of this connection (another thread's PostRecv may take the message).
  // - Errors: a failed link (lost peer, Close, Abort) gives its status (kRemoteError naming the
  //   peer, kAborted), as a receive posted now would; a peer that left without sending anything
  //   more is such a loss. This default, for transports that cannot look ahead, fails with
  //   kInternalError.
  virtual Result<std::optional<Incoming>> Probe();

  // Single-copy reads of the peer's memory: the peer sends this rank the address of a buffer of
  // its own in an ordinary message, keeps the buffer unchanged until this rank says (in another
  // message) that it is done, and this rank copies what it needs straight out of it. Why: a
  // collective whose data all sits in its owners' buffers (all-gather, broadcast, all-to-all)
  // moves it in one round of one copy, where sends through a ring copy twice and hand every
  // block from rank to rank (algorithms/peer_reads.h has the protocol).
  //
  // Whether ReadPeerMemory works on this link: true only where the transport can copy out of
  // the peer's address space and was allowed to (shm between processes whose cross-memory-attach
  // probe passed). False by default, and for peers that are threads of this process (their
  // buffers may be freed by a failing owner while a reader copies). Constant for the link's
  // life; each side answers for its own reads, so the two directions may differ.
  virtual bool ReadsPeerMemory() const { return false; }
  // Copies `bytes` bytes at `address` (a value the peer sent, naming its own memory) into
  // `destination`. Blocking: returns once copied (one copy, on the calling thread). Errors: this
  // default, and any link whose ReadsPeerMemory() is false, kInvalidUsage; memory the peer
  // does not have mapped there (it lied, freed the buffer or died) kRemoteError naming the peer,
  // the address, the length and the kernel's reason. Thread safety: any thread.
  virtual Status ReadPeerMemory(uint64_t address, void* destination, size_t bytes);
};

}  // namespace braid::transport
