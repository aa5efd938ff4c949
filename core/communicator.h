// Communicator: one rank's membership in a group of ranks, and the collectives it runs.
//
// It owns the rendezvous store view, scratch memory, the sequence counter and the error state,
// and reaches its peers through a LinkPool (one Transport per enabled transport kind and the
// Connections made on demand) — its own, or its parent's when split with splitShare.
//
// Execution: a communicator runs its operations one at a time in the order they are called
// (op_mutex_), on the calling thread, and host operations return when complete. Different
// communicators are independent and may run at once from different threads, except those sharing
// a LinkPool, which take turns (core/link_pool.h).
//
// Errors: bad arguments found inside an operation are reported without touching the
// communicator. A call that the binding refuses for bad input before it starts breaks it when
// other ranks exist (FailOnBadInput: they would otherwise wait for this rank). A failure while
// data is in flight (lost peer, timeout, abort) breaks it: transports are aborted so no buffer is
// written after the call returns, the error is kept (AsyncError) and every later call fails at
// once with that same error.
//
// Root causes (docs/FAILURES.md): a rank that breaks first works out which rank failed first and
// how (gone, aborted by the application, timed out, bad input), writes that under cause/<rank> in
// the store BEFORE its links close, and its message leads with it: "rank 2 is gone (seen by rank
// 1); rank 0's own view: ...". A rank that sees a link close waits a bounded moment (300 ms) for
// the closing rank's record and, if there is one, reports that rank's root cause, not the rank:
// so a chain of aborts keeps naming the original victim.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/calibration.h"
#include "algorithms/collective.h"
#include "algorithms/host_topology.h"
#include "algorithms/selector.h"
#include "algorithms/tag_layout.h"
#include "core/base/config.h"
#include "core/base/datatype.h"
#include "core/base/deadline.h"
#include "core/hang_diagnosis.h"
#include "core/base/light_lock.h"
#include "core/link_pool.h"
#include "core/base/status.h"
#include "core/device_path/device_work_queue.h"
#include "core/device_path/direct_collectives.h"
#include "core/device_path/stream_join.h"
#include "rendezvous/peer_exchange.h"
#include "rendezvous/peer_table.h"
#include "rendezvous/store.h"
#include "transport/connection.h"
#include "transport/transport.h"

namespace braid {

class Communicator {
 public:
  struct InitOptions {
    int rank = 0;
    int size = 1;
    Config config;
    // Identifies this communicator on the wire (transport handshakes refuse other ids).
    uint64_t comm_id = 0;
    // Transport connections prove they hold it (the unique id's token; BRAID_SECRET under
    // env://; inherited by Split). "" = no authentication.
    std::string secret;
    // A view of the store private to this communicator (a PrefixStore).
    std::shared_ptr<rendezvous::Store> store;
    // Opens another connection with the same view, for the hang-diagnosis thread (which parks
    // in a blocking Get). Empty: no hang diagnosis.
    std::function<Result<std::shared_ptr<rendezvous::Store>>()> open_store;
    // Set by Split with splitShare: reach peers through these links (no transports of its own,
    // no peer exchange); pool_ranks[r] is rank r's rank in the pool.
    std::shared_ptr<LinkPool> shared_links;
    std::vector<int> pool_ranks;
    // Where the store lives ("host:port"; "" = unknown) and which rank's process hosts it (-1:
    // none of this communicator's, or unknown), so that a failure whose cause cannot be read
    // because the store is gone says so and names the rank that took it down (env://: rank 0).
    std::string store_address;
    int store_host_rank = -1;
    // The cost model's numbers. Null: rank 0's, agreed through the store at creation
    // (core/calibration_agreement.h); Split passes its own, so children price as their parent.
    std::shared_ptr<const algorithms::Calibration> calibration;
  };

  // Rendezvous with the other ranks (checks nranks agreement and duplicate ranks, lists missing
  // ranks on timeout), then connects the ring neighbours. Blocks until config.timeout_ms.
  static Result<std::unique_ptr<Communicator>> Create(InitOptions options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  // The CUDA device this communicator's device work runs on, from its first device-buffer call
  // on; -1 before that (a host-only communicator). Any thread.
  int CuDevice() const { return cu_device_.load(std::memory_order_acquire); }
  int size() const { return size_; }
  const Config& config() const { return config_; }

  // Runs one collective on host buffers (arguments already validated by the caller) with the
  // algorithm the selector picks; returns when done.
  Status RunCollective(const algorithms::CollectiveArgs& args);

  // One send or receive of a point-to-point batch.
  struct PeerTransfer {
    bool is_send = true;
    int peer = 0;
    const void* sendbuf = nullptr;
    void* recvbuf = nullptr;
    size_t bytes = 0;
  };
  // Posts every transfer, then waits for all: matched sends and receives never deadlock whatever
  // their order (a lone Send or Recv is a batch of one). Transfers between a pair match in order,
  // and a receive must have the same size as its send.
  Status RunPointToPoint(const std::vector<PeerTransfer>& transfers);
  // Receives `bytes` bytes into `buf` from whichever peer's next point-to-point message to this
  // rank arrives first (MPI_ANY_SOURCE) and sets `*from` to that peer. The message is the
  // sender's next in the pair's order, as RunPointToPoint's receive would take it. Peers are
  // polled round-robin (Connection::Probe), starting after the last one served, and linked as
  // they become reachable: at once where this rank dials, as soon as the peer has dialed
  // otherwise, so a peer that never sends to this rank is never waited for. Errors: a first
  // message of another size is kInvalidUsage naming both sizes and the sender, and stays for a
  // receive of its size (the communicator stays usable); a peer whose next message is not
  // point-to-point (it moved on to a collective) is not a candidate, and when no peer is left
  // that is kInvalidUsage; otherwise as RunPointToPoint (deadline, abort, lost peer, a pair out
  // of step), naming this rank and the peer.
  Status ReceiveFromAny(void* buf, size_t bytes, int* from);

  // Device buffers (core/device_path/, docs/CUDA.md): the collective, or the point-to-point batch,
  // is enqueued on the application's stream `stream` (null: the legacy default stream) through
  // this communicator's own stream, and the call returns without waiting for device work. The
  // progress thread runs its host part over pinned staging in enqueue order; its errors become
  // AsyncError(). Arguments are validated by the caller, and every buffer is device memory of
  // device_path::ProcessDevice(). Host-buffer calls made while device work is queued first wait
  // for it (bounded by the timeout), so every rank runs operations in the order it issued them.
  Status EnqueueCollective(const algorithms::CollectiveArgs& args, void* stream);
  Status EnqueuePointToPoint(const std::vector<PeerTransfer>& transfers, void* stream);
  // Several application streams in one group (NCCL's semantics; device_path/stream_join.h): the
  // group's device work is enqueued on streams[0] between JoinDeviceStreams (streams[0] waits for
  // the others' work so far) and ReleaseDeviceStreams (the others wait for streams[0]'s).
  Status JoinDeviceStreams(const std::vector<void*>& streams);
  Status ReleaseDeviceStreams(const std::vector<void*>& streams);

  // NCCL's ncclCommSplit: every rank of this communicator calls it; ranks passing the same
  // `color` form a new communicator, ordered by `key` then by rank here. kNoColor returns a null
  // pointer (the rank still takes part in the exchange). The exchange runs under a store prefix
  // made of this communicator's identity and a split counter, so splits never collide however
  // many run. The child gets `config`; with config.split_share it reaches its peers through this
  // communicator's links and takes turns with it (core/link_pool.h), otherwise it has transports
  // of its own and never blocks this one. Every member of a color must agree on split_share.
  static constexpr int kNoColor = -1;
  Result<std::unique_ptr<Communicator>> Split(int color, int key, Config config);

  // Completes outstanding work (host operations are already complete) and refuses new work.
  Status Finalize();
  // A call of this rank that the binding refused for bad input (`bad_input`: its
  // kInvalidArgument or kInvalidUsage) before it reached the communicator: collective `op`
  // (`numbered`: it would have been collective #next, named so) or a send or receive. Its peers
  // may be inside that call already, or about to enter it, and would wait for this rank until
  // their timeout; so with other ranks it breaks the communicator, first recording "rank R failed
  // on bad input at <op> (invalid argument): <what>" as the root cause, and returns that error
  // with `bad_input`'s code: every peer then names this rank and its input first, with that code.
  // A communicator of one rank, or one already broken or finalized, returns `bad_input` as it is
  // and stays as it was (nobody waits for this rank there).
  Status FailOnBadInput(const Status& bad_input, const char* op, bool numbered);
  // Wakes every blocked wait of this communicator with Code::kAborted, at once, from any thread;
  // later calls fail immediately. First records "rank R aborted" as the root cause in the store
  // (bounded: 500 ms at most, so a lost store cannot hold up the abort), so that peers whose
  // links to this rank close say "rank R aborted" rather than "connection lost".
  void Abort();
  // OK while healthy; otherwise the error that broke the communicator.
  Status AsyncError() const;

  // The links this communicator's operations use (shared with a parent or children under
  // splitShare); tests compare them.
  const LinkPool* links() const { return links_.get(); }

 private:
  Communicator(InitOptions options, rendezvous::PeerTable peers,
               std::shared_ptr<LinkPool> links, std::vector<int> pool_ranks,
               algorithms::AlgorithmPolicy policy);

  // Runs `body` as one operation: checks state, builds the context (deadline, connections,
  // scratch), records a breaking error. `sequence` numbers the collective, and the context
  // carries it in tag space `space` (algorithms/tag_layout.h) so that its tags never match
  // another space's. Point-to-point batches (kPointToPoint) are not numbered (only two ranks
  // take part; their tags count per pair), and a hang in one is not diagnosed through the other
  // ranks.
  template <typename Body>
  Status RunOperation(algorithms::TagSpace space, uint64_t sequence, const char* op, Body body);
  // Waits for queued device work (its host parts) before a host-buffer call; at once on the
  // progress thread, which runs those host parts through RunCollective and RunPointToPoint.
  Status WaitForDeviceWork() {
    device_path::DeviceWorkQueue* queue = device_work_live_.load(std::memory_order_acquire);
    if (queue == nullptr || queue->Idle() || queue->OnProgressThread()) return Status::Ok();
    return queue->WaitIdle(Deadline::AfterMs(config_.timeout_ms));
  }
  // The device work queue, made on first use. Caller holds device_mutex_.
  Result<device_path::DeviceWorkQueue*> DeviceWorkLocked();
  // The direct path (device_path/direct_collectives.h) when this communicator takes it for its
  // device collectives, made on first use; null when it does not (decided once, alike on every
  // rank: 2 to 8 ranks, all on this host by cuda_ipc's rule, cuda_ipc allowed by BRAID_TRANSPORTS,
  // BRAID_DEVICE_ALGO unset or direct). Caller holds device_mutex_, after DeviceWorkLocked.
  Result<device_path::DirectCollectives*> DirectLocked(device::Device* device);
  // Runs `args` with the registered `algorithm`, outside the selector, as an operation of
  // collective `sequence` in tag space `space` (kTrial or kCheck, so that its messages never
  // match the collective's): BRAID_CHECK's argument exchange and a trial's sum.
  Status RunInternal(const algorithms::CollectiveArgs& args, const char* algorithm,
                     algorithms::TagSpace space, uint64_t sequence, const char* op);
  // The rank that failed first, how, and who saw it: one entry of a root-cause record.
  enum class FailureKind { kGone = 0, kAborted = 1, kTimedOut = 2, kBadInput = 3, kFailed = 4 };
  struct Cause {
    int rank = -1;  // the rank that failed first
    FailureKind how = FailureKind::kFailed;
    int seen_by = -1;
    Code code = Code::kInternalError;  // the code every rank reports for it
    std::string phrase;  // "rank 2 is gone (seen by rank 1)", the message's lead
    // `rank` is gone (its process or its link), as `seen_by` saw it: braidRemoteError.
    static Cause Gone(int rank, int seen_by, std::string phrase) {
      return Cause{rank, FailureKind::kGone, seen_by, Code::kRemoteError, std::move(phrase)};
    }
  };
  // For an error that breaks the communicator: works out the root cause(s) (after a timeout,
  // from the hang diagnosis; after a lost link, from the closing rank's record, waited for up to
  // 300 ms; after this rank's abort, itself), publishes them under cause/<rank> before the links
  // close, and returns the error led by them, with the root's code.
  // `space` and `sequence` are the failed operation's (RunOperation).
  Status ExplainFailure(const Status& status, algorithms::TagSpace space, uint64_t sequence,
                        const char* op);
  // After a lost link: the closing peer's recorded root cause, or "peer is gone" when it left no
  // record within the bounded wait; plus any other root recorded meanwhile (two ranks at once).
  std::vector<Cause> CausesAfterLostLink(const Status& status);
  // `peer`'s record (cause/<peer>), polled for up to `wait_ms`; empty if none came or the store
  // failed (then `store_error` says how).
  std::vector<Cause> AwaitRecord(int peer, int64_t wait_ms, Status* store_error);
  // The root causes a peer's goodbye names (its error message: "rank 2 is gone (seen by rank 1);
  // rank 1's own view: ..."), for when its store record cannot be read.
  std::vector<Cause> CausesFromGoodbye(const std::string& text, int peer) const;
  // Adds to `causes` the roots other ranks recorded (or ranks seen lost that recorded nothing),
  // skipping ranks already named. `store_error` gets the first store failure, if any.
  void MergeRecordedCauses(std::vector<Cause>* causes, Status* store_error);
  // The record under cause/<rank> and back (a record of another version parses as no causes).
  static std::string SerializeCauses(const std::vector<Cause>& causes);
  static std::vector<Cause> ParseCauses(const std::string& record);
  // Writes this rank's record (cause/<rank>) with `deadline`.
  Status PublishCauses(const std::vector<Cause>& causes, Deadline deadline);
  // "rank 0 is gone: the store at host:port it hosted no longer answers (seen by rank 2)" when
  // the store is lost and this communicator knows which rank hosted it.
  std::optional<Cause> StoreHostCause(const Status& store_error) const;
  // BRAID_CHECK: allgathers every rank's (collective, datatype, op, root, count) and fails with
  // InvalidUsage led by the odd rank(s) out (those whose call differs from the one most ranks
  // made: "rank 2 failed on bad input at allreduce #4 (invalid usage): it called ..."), then this
  // rank's own view naming the first rank whose call differs from this one's.
  Status CompareAcrossRanks(const algorithms::CollectiveArgs& args, uint64_t sequence);
  // After a trial call of `args` (collective `sequence`) that took `elapsed_us`: records it and,
  // at the end of a round, sums the ranks' timings and settles the trial or starts another round.
  Status FinishTrialCall(const algorithms::CollectiveArgs& args,
                         algorithms::AlgorithmTrials::Trial* trial, uint64_t sequence,
                         double elapsed_us);
  Result<transport::Connection*> GetConnection(int peer, Deadline deadline);
  // LinkPool::GetIfReady for this communicator's `peer`; records a link it returns.
  Result<transport::Connection*> GetConnectionIfReady(int peer, Deadline deadline);
  // Whether the caller runs a host part of this communicator's device work (the progress thread
  // inside a staged step), whose links are device_connections_. One relaxed load where this
  // communicator has no device links.
  bool OnDeviceLinks() const;
  // GetConnection / GetConnectionIfReady (`if_ready`) for device work: over device_links_ where
  // its cuda_ipc transport can reach `peer` (a rank of this host), else over links_; records the
  // link in device_connections_.
  Result<transport::Connection*> GetDeviceConnection(int peer, Deadline deadline, bool if_ready);
  // device_links_, made with the device work queue: the cuda_ipc transport over `device`, its
  // address published under this communicator's store ("device_links/<rank>"). Leaves it null
  // where BRAID_TRANSPORTS excludes cuda_ipc, the job has one rank, or the transport is not
  // available. Caller holds device_mutex_.
  Status MakeDeviceLinksLocked(device::Device* device);
  // Before a staged step on the progress thread: links device_links_ to every rank of this host
  // among `peers` (empty: all ranks) not linked yet, in increasing rank order. Why up front and in
  // that order: a cuda_ipc link is made by both ranks inside Connect at once (each offers the
  // other an inbox), so ranks that each waited for one neighbour in a ring would wait for each
  // other forever; linking in rank order always completes (the lowest unlinked pair is the first
  // wish of both its ranks). A failure breaks the communicator.
  Status LinkDevicePeers(const std::vector<int>& peers);
  // While device links wait for a peer's address: an error if this communicator is broken or
  // one of its links (connections_) has lost its peer. Caller holds op_mutex_.
  Status LinksStillUp();
  Status CopyToSelf(const std::vector<PeerTransfer>& transfers) const;
  // OK unless the communicator is broken or finalized. Called with op_mutex_ held, twice per
  // operation: inline, and the usable case builds no message (WhyUnusable does, when not).
  Status CheckUsable() const {
    if (!broken_.load() && !finalized_) return Status::Ok();
    return WhyUnusable();
  }
  Status WhyUnusable() const;
  // The pool's lane, locked, when another communicator shares the pool; else an empty lock.
  // Called with op_mutex_ held.
  std::unique_lock<std::mutex> HoldLaneIfShared() {
    if (!links_->Shared()) return std::unique_lock<std::mutex>();
    return std::unique_lock<std::mutex>(links_->lane());
  }
  void* Scratch(size_t bytes);
  // Records `error` as the communicator's fatal error (first one wins) and aborts transports.
  void Break(const Status& error);

  const int rank_;
  const int size_;
  const Config config_;
  const uint64_t comm_id_;
  const std::string secret_;
  std::shared_ptr<rendezvous::Store> store_;
  // Every rank's identity, one entry per host (the full records are read per linked peer).
  const rendezvous::PeerTable peers_;
  // Which ranks share a host, from peers_ (the same on every rank); algorithms see it through
  // their context and the selector through its link model's hosts and ranks per host.
  const algorithms::HostTopology topology_;
  // Fixed after construction, so Abort() may reach it from any thread. Connections come from it;
  // its lane is held for the whole of each operation.
  const std::shared_ptr<LinkPool> links_;
  const std::vector<int> pool_ranks_;  // this communicator's rank r is rank pool_ranks_[r] there
  // Rank 0's calibration, the same on every rank (InitOptions::calibration).
  const std::shared_ptr<const algorithms::Calibration> calibration_;
  // The job's link model (also the cost model's) and the algorithm choice; guarded by op_mutex_.
  algorithms::CachedSelector selector_;

  // Lock order: op_mutex_, then links_->lane() (taken only while the pool is shared), then
  // error_mutex_.
  LightLock op_mutex_;  // one operation at a time; guards the members below
  std::vector<char> scratch_;
  // connections_[r]: the link to rank r once GetConnection made or found it, else null. Links
  // live as long as the pool, which outlives this communicator.
  std::vector<transport::Connection*> connections_;
  uint64_t next_sequence_ = 0;
  uint64_t splits_ = 0;  // every rank splits in the same order, so the k-th split matches
  // Point-to-point messages per peer, counted separately from collectives (only the two ranks of
  // a pair take part), so their tags match however collectives interleave.
  std::map<int, uint64_t> sends_to_;
  std::map<int, uint64_t> receives_from_;
  int any_source_turn_ = 0;  // ReceiveFromAny polls from this peer on (round-robin across calls)
  // Written under op_mutex_; atomic because device enqueues read it without op_mutex_.
  std::atomic<bool> finalized_{false};

  mutable std::mutex error_mutex_;  // guards error_ and aborted_by_application_
  Status error_;
  bool aborted_by_application_ = false;  // Abort() was called: this rank is its own root cause
  const std::string store_address_;
  const int store_host_rank_;
  std::atomic<bool> broken_{false};

  // Device work (core/device_path). Lock order: device_mutex_ is taken without op_mutex_ (an
  // enqueue never waits for a running operation) and before error_mutex_ (through Break).
  std::mutex device_mutex_;  // serialises enqueues; guards device_work_ and device_links_
  // The links device work takes to the ranks of this host: cuda_ipc, whose rings are device
  // memory (transport/cuda_ipc), made on the first device call; peers it cannot reach go over
  // links_. Host-buffer calls never use them, so a communicator that never sees a device buffer
  // keeps exactly its transports. Declared before device_work_: the progress thread uses them.
  std::unique_ptr<LinkPool> device_links_;
  std::atomic<LinkPool*> device_links_live_{nullptr};  // for Break and the host path's one look
  // As connections_, for the progress thread's operations; guarded by op_mutex_.
  std::vector<transport::Connection*> device_connections_;
  // Made with device_work_ and declared before it, so it outlives the queue's stream wait.
  std::unique_ptr<device_path::StreamJoin> stream_join_;
  std::unique_ptr<device_path::DeviceWorkQueue> device_work_;
  // Device collectives of a single-host communicator, on device_work_'s stream; destroyed first.
  std::unique_ptr<device_path::DirectCollectives> direct_;
  std::atomic<device_path::DirectCollectives*> direct_live_{nullptr};  // for Abort's lock-free look
  enum class DirectChoice { kUndecided, kDirect, kStaged };
  DirectChoice direct_choice_ = DirectChoice::kUndecided;  // guarded by device_mutex_
  // device_work_'s pointer once made, for the host path's and Abort's lock-free look.
  std::atomic<device_path::DeviceWorkQueue*> device_work_live_{nullptr};
  std::atomic<int> cu_device_{-1};  // CuDevice(): set with device_work_

  const std::function<Result<std::shared_ptr<rendezvous::Store>>()> open_store_;
  ProgressBoard progress_;
  // Declared last: its thread reads progress_ and uses store_, so it stops first.
  std::unique_ptr<HangDiagnosis> diagnosis_;
};

}  // namespace braid
