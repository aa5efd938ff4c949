// VerbsLink / VerbsConnection: one reliable-connected QP to one peer, and the flow control that
// moves messages over it.
//
// Data path (why this shape):
// - Each side registers a ring of kSlots slots of kSlotBytes for the peer to write into. A message
//   goes as chunks of up to kSlotBytes - 16 bytes, each one RDMA write with immediate into the
//   next slot: a 16-byte SlotHeader (tag, message size) gathered from this side's header array,
//   then the payload gathered straight from the caller's buffer (registered through the
//   RegistrationCache, no copy on the sending side). The immediate carries the chunk's length.
// - Credits: a side may have at most kSlots chunks unconsumed in the peer's ring. The receiver
//   returns freed slots with a zero-byte write with immediate (kCreditFlag | count) once it has
//   copied them out, several at a time when several were consumed in one pass. So a sender never
//   writes into a slot still in use, and never writes to a peer without a posted receive: each
//   side keeps 2 * kSlots + 2 receives posted (enough for a full window of data plus the credit
//   returns that can be in flight), so receiver-not-ready never happens (no RNR retry storms).
// - Large messages are pipelined: as soon as a credit comes back the next chunk goes, while the
//   receiver copies out the previous ones.
// - Completions: one CQ per link for both directions. Writes complete in post order, so a send
//   completes when its last chunk's write completion arrives.
// - Progress: the threads that post, test and wait poll the CQs of every link of the transport
//   (VerbsDriver), so a rank waiting on one peer still returns credits to and feeds the others (a
//   ring of ranks each waiting on its receive first works). A send also has to go on when its
//   thread does not wait (it posted and moved on to other work): the credits that let its next
//   chunks go only show up on the CQ. So while any send or link set-up is unfinished, the
//   transport's backstop thread drives every link once a millisecond (VerbsDriver::RunBackstop;
//   tcp's io thread does the same for stalled sends); with none in progress it sleeps.
// - Failures: an error completion fails every pending request with kRemoteError naming the peer
//   and the verbs status; the authenticated bootstrap link made at set-up stays open and is
//   probed every 20 ms while a wait makes no progress, so a peer whose process is gone is named
//   within tens of milliseconds instead of after the adapter's retry timeout (or never, for a
//   receive).
//
// Lock order: a link's mutex_ (all its state, the verbs calls on its QP and CQ, the calls on its
// bootstrap link), then VerbsDriver::backstop_mutex_ (Kick); VerbsDriver::mutex_ (the link list)
// is a leaf, never held while a link's mutex_ is taken.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "transport/connection.h"
#include "transport/ibverbs/device.h"
#include "transport/ibverbs/registration_cache.h"
#include "transport/ibverbs/wire.h"
#include "transport/wait_budget.h"

namespace braid::transport::ibverbs {

// Ring geometry: 16 slots of 128 KiB (2 MiB per link and direction).
constexpr uint32_t kSlots = 16;
constexpr uint32_t kSlotBytes = 128 * 1024;
constexpr uint32_t kRecvDepth = 2 * kSlots + 2;
constexpr uint32_t kSendDepth = 2 * kSlots + 4;


class VerbsDriver;

class VerbsLink {
 public:
  // Creates the CQ and QP (moved to INIT) and registers the ring and the header array.
  // Errors: kSystemError naming the verbs call and errno.
  static Result<std::shared_ptr<VerbsLink>> Create(std::shared_ptr<VerbsDevice> device,
                                                   std::shared_ptr<RegistrationCache> cache,
                                                   const IbConfig& config, int rank, int peer);
  ~VerbsLink();
  VerbsLink(const VerbsLink&) = delete;
  VerbsLink& operator=(const VerbsLink&) = delete;

  // What the peer needs (QPN, PSN, LID/GID, ring address and key).
  const SetupInfo& local_info() const { return local_; }
  // Starts the set-up over the authenticated `bootstrap` link, without blocking: sends this
  // side's SetupInfo and posts receives for the peer's and for its ready message. The link
  // finishes as they arrive, whenever it is driven (a wait, a test, the backstop): the peer's
  // record checked, the receives posted, the QP moved to RTR and RTS, a ready message sent; it
  // writes only once the peer's ready message is in. Why not block in Connect: a rank links its
  // peers one after another, and a ring of ranks each waiting in Connect for the next one's
  // record would wait for ever (tcp's and shm's accepting sides answer on a thread of their own
  // for the same reason). The bootstrap link then stays, to notice a peer that is gone.
  void Start(std::unique_ptr<Connection> bootstrap);
  // Tests only: wires the QP to `peer` at once, without a bootstrap link. Errors as the set-up's.
  Status Connect(const SetupInfo& peer);

  int peer() const { return peer_; }
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag,
                      const std::shared_ptr<VerbsDriver>& driver);
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink,
                      const std::shared_ptr<VerbsDriver>& driver);
  Result<std::optional<Connection::Incoming>> Probe();

  // Polls the CQ and moves what can move. Returns true if anything happened. `check_peer`: also
  // probe the bootstrap link (rate-limited), done when a wait saw no progress for a while.
  bool Progress(bool check_peer);
  // Why `request` (one of this link's) is still pending, or "" when it is not this link's.
  std::string Stall(const Request* request);
  // Fails every pending and future request with `reason` (OK: "... was closed") and moves the
  // QP to the error state; the QP and the ring stay until destruction. Closes the bootstrap link
  // too unless `keep_bootstrap` (an aborting transport closes it itself, saying why to the peer).
  // Idempotent.
  void Fail(const Status& reason, bool keep_bootstrap = false);
  // Whether a send or the set-up is unfinished (the backstop keeps driving while one is).
  bool Sending();

 private:
  struct OutSend {
    const char* data = nullptr;
    size_t bytes = 0;
    uint64_t tag = 0;
    size_t posted = 0;  // payload bytes handed to the QP
    std::shared_ptr<Region> region;
    RequestPtr request;
  };
  struct InRecv {
    char* data = nullptr;  // null when landing into `sink`
    size_t bytes = 0;
    uint64_t tag = 0;
    size_t offset = 0;
    bool started = false;
    std::shared_ptr<LandingSink> sink;
    RequestPtr request;
  };
  struct InFlight {
    bool last_of_message = false;  // completes sends_.front()
    std::shared_ptr<Region> region;
  };
  struct Landed {
    uint32_t slot = 0;
    uint32_t length = 0;  // header included
  };

  VerbsLink(std::shared_ptr<VerbsDevice> device, std::shared_ptr<RegistrationCache> cache,
            const IbConfig& config, int rank, int peer);
  // Checks the peer's record, posts the receives and moves the QP to RTR and RTS. Errors: a
  // record of another version or ring geometry (kInvalidUsage naming both), a refused
  // transition (kSystemError).
  Status ConnectLocked(const SetupInfo& peer);
  bool AdvanceSetupLocked();  // moves the set-up on as the bootstrap messages arrive
  // A request of `driver`'s, already failed with the link's status if the link has failed.
  RequestPtr NewRequestLocked(const std::shared_ptr<VerbsDriver>& driver);
  // Probes the bootstrap link; a closed one fails the link ("rank P is gone"): true then.
  bool PeerGoneLocked();
  bool PollLocked();          // drains the CQ
  bool DeliverLocked();       // hands landed chunks to posted receives
  bool PostChunksLocked();    // writes chunks while credits and queue room last
  bool ReturnCreditsLocked();
  bool PostWriteLocked(ibv_sge* sge, int num_sge, uint64_t remote_addr, uint32_t imm,
                       InFlight in_flight);
  void FailLocked(const Status& reason);
  const char* SlotAt(uint32_t slot) const { return ring_.get() + size_t{slot} * kSlotBytes; }
  std::string Who() const;

  const std::shared_ptr<VerbsDevice> device_;
  const VerbsApi& api_;
  const std::shared_ptr<RegistrationCache> cache_;
  const IbConfig config_;
  const int rank_;
  const int peer_;

  std::mutex mutex_;  // guards everything below
  Status status_;     // non-OK once failed
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::unique_ptr<char[]> ring_;             // kSlots * kSlotBytes, written by the peer
  std::unique_ptr<Region> ring_region_;
  std::unique_ptr<SlotHeader[]> headers_;    // one per send slot, gathered into each write
  std::unique_ptr<Region> headers_region_;
  SetupInfo local_;
  SetupInfo remote_;
  std::unique_ptr<Connection> bootstrap_;
  int64_t last_peer_check_ns_ = 0;

  // Set-up (Start): exchanging SetupInfo, then waiting for the peer's ready message, then up.
  enum class Stage { kExchanging, kReadying, kUp };
  Stage stage_ = Stage::kExchanging;
  SetupInfo peer_info_;  // received into over the bootstrap link
  uint8_t ready_out_ = 1;
  uint8_t ready_in_ = 0;
  RequestPtr info_sent_, info_received_, ready_sent_, ready_received_;

  // Sending.
  uint32_t credits_ = kSlots;
  uint64_t send_slot_ = 0;       // chunks written so far
  std::deque<OutSend> sends_;    // not yet complete, in post order
  size_t next_to_post_ = 0;      // index in sends_ of the first message with chunks to write
  std::deque<InFlight> in_flight_;  // writes posted, completion pending, in post order

  // Receiving.
  uint64_t recv_slot_ = 0;       // data chunks landed so far
  std::deque<Landed> landed_;    // landed, not yet consumed
  std::deque<InRecv> recvs_;     // posted receives, in order
  uint32_t credits_owed_ = 0;    // slots consumed, not yet returned
  uint64_t discard_left_ = 0;    // payload bytes of a refused message still to drop
};

// Drives every link of one transport (see the top of the file); requests are made with it.
class VerbsDriver : public RequestDriver {
 public:
  explicit VerbsDriver(int ranks) : budget_(WaitBudget::For(ranks)) {}
  void Add(const std::shared_ptr<VerbsLink>& link);
  void Progress() override;
  Status Wait(const Request& request, Deadline deadline) override;
  // Fails every link's requests with `reason`, leaving their bootstrap links open (Abort).
  void FailAll(const Status& reason);

  // The transport's backstop thread runs this until Stop(): while any link has a send or its
  // set-up unfinished it drives every link once a millisecond, otherwise it sleeps until Kick().
  void RunBackstop();
  // A send or a set-up was started: wake the backstop if it sleeps. Cheap when it is awake.
  void Kick();
  void Stop();

 private:
  bool ProgressAll(bool check_peers);
  std::vector<std::shared_ptr<VerbsLink>> Links();
  const WaitBudget budget_;
  std::mutex mutex_;  // guards links_; a leaf lock (never held while a link's lock is taken)
  std::vector<std::weak_ptr<VerbsLink>> links_;
  std::atomic<bool> backstop_awake_{false};
  std::mutex backstop_mutex_;  // guards kicked_, stopped_; a leaf lock
  std::condition_variable backstop_cv_;
  bool kicked_ = false;
  bool stopped_ = false;
};

// The Connection algorithms see; destroying it closes the link.
class VerbsConnection : public Connection {
 public:
  VerbsConnection(std::shared_ptr<VerbsLink> link, std::shared_ptr<VerbsDriver> driver)
      : link_(std::move(link)), driver_(std::move(driver)) {}
  ~VerbsConnection() override;
  int peer() const override { return link_->peer(); }
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) override;
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) override;
  void Close(const Status& reason) override { link_->Fail(reason); }
  // Pieces are handed over straight from the ring slots they landed in.
  bool LandsInPlace() const override { return true; }
  RequestPtr PostRecvInto(size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink) override;
  Result<std::optional<Incoming>> Probe() override { return link_->Probe(); }

 private:
  const std::shared_ptr<VerbsLink> link_;
  const std::shared_ptr<VerbsDriver> driver_;
};

}  // namespace braid::transport::ibverbs
