#include "core/device_path/direct_collectives.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/base/deadline.h"

namespace braid::device_path {
namespace {

using algorithms::Collective;

char* At(void* base, size_t element, size_t bytes_per) { return static_cast<char*>(base) + element * bytes_per; }
const char* At(const void* base, size_t element, size_t bytes_per) {
  return static_cast<const char*>(base) + element * bytes_per;
}

}  // namespace

bool DirectCollectives::Handles(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kAllGather:
    case Collective::kBroadcast:
    case Collective::kReduceScatter:
      return true;
    default:
      return false;
  }
}

Result<std::unique_ptr<DirectCollectives>> DirectCollectives::Create(device::Device& device,
                                                                     std::unique_ptr<DirectPeers> peers,
                                                                     Options options) {
  if (peers == nullptr || peers->slots() != kSlots || peers->slot_bytes() < kSlotBytes) {
    return Status::InvalidUsage("direct device path: peers without " + std::to_string(kSlots) + " slots of " +
                                std::to_string(kSlotBytes) + " bytes");
  }
  std::unique_ptr<DirectCollectives> direct(new DirectCollectives(device, std::move(peers), std::move(options)));
  BRAID_ASSIGN_OR_RETURN(direct->joined_, device.NewEvent());
  DirectCollectives* raw = direct.get();
  direct->watcher_ = std::thread([raw] { raw->Watch(); });
  return direct;
}

DirectCollectives::DirectCollectives(device::Device& device, std::unique_ptr<DirectPeers> peers, Options options)
    : device_(device),
      peers_(std::move(peers)),
      options_(std::move(options)),
      rank_(peers_->rank()),
      size_(peers_->size()) {}

DirectCollectives::~DirectCollectives() {
  // What is enqueued reads the peers' memory and this rank's: it must be done before the memory
  // goes. A clean finish tells the peers so (their last reads of this rank's slots are covered by
  // the goodbye's step number); work that cannot finish is released first.
  const Deadline deadline = Deadline::AfterMs(5000);
  auto all_done = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Pending& p : pending_) {
      auto done = p.done->Query();
      if (!done.ok() || !done.value()) return false;
    }
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (watcher_.joinable()) watcher_.join();
  while (!all_done() && !deadline.Expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  uint32_t last = 0;
  bool released = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = seq_.load();
    released = released_;
  }
  if (all_done() && !released) {
    peers_->SayGoodbye(last);
    return;
  }
  ReleaseAll(rank_, false);
  const Deadline again = Deadline::AfterMs(5000);
  while (!all_done() && !again.Expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

uint32_t DirectCollectives::steps() const {
  return seq_.load();
}

void DirectCollectives::ReleaseAll(int cause, bool application_abort) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) return;
    released_ = true;
    if (noted_cause_ >= 0) {  // the watcher found the cause and is failing the communicator with it
      cause = noted_cause_;
      application_abort = noted_abort_;
    }
    peers_->ReleaseOwnWaits(seq_.load());
    wake_.notify_all();
  }
  peers_->SayBrokeOff(cause, application_abort);
}

Result<uint32_t> DirectCollectives::BeginStep(device::Stream& s) {
  const uint32_t q = ++seq_;
  if (q > static_cast<uint32_t>(kSlots)) BRAID_RETURN_IF_ERROR(Await(s, Flag::kConsumed, q - kSlots));
  return q;
}

Status DirectCollectives::Announce(device::Stream& s, Flag flag, uint32_t q) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    DirectFlagBlock* block = peers_->flags(p);
    DirectFlag& f = flag == Flag::kReady ? block->ready[rank_]
                    : flag == Flag::kReduced ? block->reduced[rank_]
                                              : block->consumed[rank_];
    BRAID_RETURN_IF_ERROR(s.WriteValue32(&f.value, q));
  }
  return Status::Ok();
}

Status DirectCollectives::Await(device::Stream& s, Flag flag, uint32_t q, int only) {
  DirectFlagBlock* own = peers_->flags(rank_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || (only >= 0 && p != only)) continue;
    DirectFlag& f = flag == Flag::kReady ? own->ready[p] : flag == Flag::kReduced ? own->reduced[p] : own->consumed[p];
    BRAID_RETURN_IF_ERROR(s.WaitValue32(&f.value, q));
  }
  return Status::Ok();
}

// Elements per step: a slot's worth (allreduce, reduce, allgather, broadcast), or a slot's worth
// split into the N blocks (reducescatter).

// Allreduce: every rank folds, one-shot or two-shot by the step's size. Reduce: only the root
// waits and folds (one-shot: it must read every rank's chunk anyway); the others copy in,
// announce, and are done with the step.
Status DirectCollectives::Reduction(const algorithms::CollectiveArgs& args, device::Stream& s) {
  const bool all = args.kind == Collective::kAllReduce;
  const bool folds = all || rank_ == args.root;
  const size_t e = DataTypeSize(args.type);
  const size_t per_step = kSlotBytes / e;
  const void* inputs[DirectFlagBlock::kMaxRanks];
  for (size_t a = 0; a < args.count; a += per_step) {
    const size_t m = std::min(per_step, args.count - a);
    BRAID_ASSIGN_OR_RETURN(uint32_t q, BeginStep(s));
    BRAID_RETURN_IF_ERROR(s.Copy(Slot(rank_, q), At(args.sendbuf, a, e), m * e));
    BRAID_RETURN_IF_ERROR(Announce(s, Flag::kReady, q));
    if (folds) BRAID_RETURN_IF_ERROR(Await(s, Flag::kReady, q));
    if (folds && (!all || m * e < kTwoShotFromBytes)) {
      for (int p = 0; p < size_; ++p) inputs[p] = Slot(p, q);
      BRAID_RETURN_IF_ERROR(s.ReduceMany(args.type, args.op, At(args.recvbuf, a, e), inputs, size_, m));
    } else if (folds) {
      // Rank p owns elements [m p / N, m (p + 1) / N) of the step: it reduces them from every
      // slot into its own slot (only it reads that slice until its `reduced`), then every rank
      // copies every owner's reduced slice out.
      auto lo = [&](int p) { return m * static_cast<size_t>(p) / static_cast<size_t>(size_); };
      for (int p = 0; p < size_; ++p) inputs[p] = Slot(p, q) + lo(rank_) * e;
      BRAID_RETURN_IF_ERROR(
          s.ReduceMany(args.type, args.op, Slot(rank_, q) + lo(rank_) * e, inputs, size_, lo(rank_ + 1) - lo(rank_)));
      BRAID_RETURN_IF_ERROR(Announce(s, Flag::kReduced, q));
      BRAID_RETURN_IF_ERROR(Await(s, Flag::kReduced, q));
      for (int p = 0; p < size_; ++p) {
        BRAID_RETURN_IF_ERROR(s.Copy(At(args.recvbuf, a + lo(p), e), Slot(p, q) + lo(p) * e, (lo(p + 1) - lo(p)) * e));
      }
    }
    BRAID_RETURN_IF_ERROR(Announce(s, Flag::kConsumed, q));
  }
  if (folds && args.op == ReduceOp::kAvg) BRAID_RETURN_IF_ERROR(s.Divide(args.type, args.recvbuf, args.count, size_));
  return Status::Ok();
}

Status DirectCollectives::AllGather(const algorithms::CollectiveArgs& args, device::Stream& s) {
  const size_t e = DataTypeSize(args.type);
  const size_t per_step = kSlotBytes / e;
  for (size_t a = 0; a < args.count; a += per_step) {
    const size_t m = std::min(per_step, args.count - a);
    BRAID_ASSIGN_OR_RETURN(uint32_t q, BeginStep(s));
    BRAID_RETURN_IF_ERROR(s.Copy(Slot(rank_, q), At(args.sendbuf, a, e), m * e));
    BRAID_RETURN_IF_ERROR(Announce(s, Flag::kReady, q));
    BRAID_RETURN_IF_ERROR(Await(s, Flag::kReady, q));
    for (int p = 0; p < size_; ++p) {
      char* to = At(args.recvbuf, static_cast<size_t>(p) * args.count + a, e);
      if (p == rank_ && to == At(args.sendbuf, a, e)) continue;  // in place: already there
      BRAID_RETURN_IF_ERROR(s.Copy(to, Slot(p, q), m * e));
    }
    BRAID_RETURN_IF_ERROR(Announce(s, Flag::kConsumed, q));
  }
  return Status::Ok();
}

Status DirectCollectives::Broadcast(const algorithms::CollectiveArgs& args, device::Stream& s) {
  const size_t e = DataTypeSize(args.type);
  const size_t per_step = kSlotBytes / e;
  const bool root = rank_ == args.root;
  for (size_t a = 0; a < args.count; a += per_step) {
    const size_t m = std::min(per_step, args.count - a);
    BRAID_ASSIGN_OR_RETURN(uint32_t q, BeginStep(s));
    if (root) {
      BRAID_RETURN_IF_ERROR(s.Copy(Slot(rank_, q), At(args.sendbuf, a, e), m * e));
      BRAID_RETURN_IF_ERROR(Announce(s, Flag::kReady, q));
      if (args.recvbuf != args.sendbuf) BRAID_RETURN_IF_ERROR(s.Copy(At(args.recvbuf, a, e), Slot(rank_, q), m * e));
    } else {
      BRAID_RETURN_IF_ERROR(Await(s, Flag::kReady, q, args.root));
      BRAID_RETURN_IF_ERROR(s.Copy(At(args.recvbuf, a, e), Slot(args.root, q), m * e));
    }
    BRAID_RETURN_IF_ERROR(Announce(s, Flag::kConsumed, q));
  }
  return Status::Ok();
}

Status DirectCollectives::ReduceScatter(const algorithms::CollectiveArgs& args, device::Stream& s) {
  const size_t e = DataTypeSize(args.type);
  const size_t per_step = kSlotBytes / e / static_cast<size_t>(size_);
  for (size_t a = 0; a < args.count; a += per_step) {
    const size_t m = std::min(per_step, args.count - a);
    BRAID_ASSIGN_OR_RETURN(uint32_t q, BeginStep(s));
    // Block p's share of the step at p m in the slot: rank p reads it from every slot.
    for (int p = 0; p < size_; ++p) {
      BRAID_RETURN_IF_ERROR(
          s.Copy(Slot(rank_, q) + static_cast<size_t>(p) * m * e, At(args.sendbuf, static_cast<size_t>(p) * args.count + a, e), m * e));
    }
    BRAID_RETURN_IF_ERROR(Announce(s, Flag::kReady, q));
    BRAID_RETURN_IF_ERROR(Await(s, Flag::kReady, q));
    const void* inputs[DirectFlagBlock::kMaxRanks];
    for (int p = 0; p < size_; ++p) inputs[p] = Slot(p, q) + static_cast<size_t>(rank_) * m * e;
    BRAID_RETURN_IF_ERROR(s.ReduceMany(args.type, args.op, At(args.recvbuf, a, e), inputs, size_, m));
    BRAID_RETURN_IF_ERROR(Announce(s, Flag::kConsumed, q));
  }
  if (args.op == ReduceOp::kAvg) BRAID_RETURN_IF_ERROR(s.Divide(args.type, args.recvbuf, args.count, size_));
  return Status::Ok();
}

Status DirectCollectives::Enqueue(const algorithms::CollectiveArgs& args, device::Stream& comm, void* native) {
  const std::string what = std::string(algorithms::CollectiveName(args.kind)) + " of " + std::to_string(args.count) +
                           " " + DataTypeName(args.type);
  const std::string who = "rank " + std::to_string(rank_) + ": direct " + what;
  std::unique_ptr<device::Event> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) return Status::Aborted(who + ": the communicator's device work was released (abort or failure)");
    if (!spare_events_.empty()) {
      done = std::move(spare_events_.back());
      spare_events_.pop_back();
    }
  }
  if (done == nullptr) {
    auto made = device_.NewEvent();
    if (!made.ok()) return made.status().WithContext(who);
    done = std::move(made).value();
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> caller, device_.WrapStream(native));
  const uint32_t first = seq_.load() + 1;
  Status enqueued = caller->Record(*joined_);
  if (enqueued.ok()) enqueued = comm.Wait(*joined_);
  if (enqueued.ok() && args.count > 0) {
    switch (args.kind) {
      case Collective::kAllReduce:
      case Collective::kReduce: enqueued = Reduction(args, comm); break;
      case Collective::kAllGather: enqueued = AllGather(args, comm); break;
      case Collective::kBroadcast: enqueued = Broadcast(args, comm); break;
      case Collective::kReduceScatter: enqueued = ReduceScatter(args, comm); break;
      default: enqueued = Status::Internal(who + ": not a direct collective");
    }
  }
  if (enqueued.ok()) enqueued = comm.Record(*done);
  if (enqueued.ok()) enqueued = caller->Wait(*done);
  if (!enqueued.ok()) {
    // The stream may already wait for flags of steps the peers will never see completed here.
    enqueued = enqueued.WithContext(who + " (steps " + std::to_string(first) + "..)");
    options_.fail(enqueued);
    ReleaseAll(rank_, false);
    return enqueued;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // An abort that came while this enqueued released the steps it had handed out by then; the
    // later ones are released here, so no wait of this stream is left behind.
    if (released_) peers_->ReleaseOwnWaits(seq_.load());
    pending_.push_back(Pending{seq_.load(), std::move(done), what});
    wake_.notify_all();
  }
  return Status::Ok();
}

void DirectCollectives::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  uint32_t watched = 0;
  Deadline deadline = Deadline::AfterMs(options_.timeout_ms);
  // Naps between looks: short while an operation is young (most finish soon), longer after; the
  // sockets are read every 20 ms at most. The watcher is not in the data path: only failures wait
  // for it.
  int looks = 0;
  auto last_probe = std::chrono::steady_clock::now() - std::chrono::hours(1);
  for (;;) {
    wake_.wait_for(lock, std::chrono::milliseconds(pending_.empty() ? 100 : 1),
                   [&] { return stopping_ || released_ || !pending_.empty(); });
    if (stopping_ || released_) return;
    if (pending_.empty()) continue;
    Pending& front = pending_.front();
    if (front.last != watched) {  // a new operation at the front: its own deadline
      watched = front.last;
      deadline = Deadline::AfterMs(options_.timeout_ms);
      looks = 0;
    }
    auto done = front.done->Query();
    if (done.ok() && done.value()) {
      spare_events_.push_back(std::move(front.done));
      pending_.pop_front();
      continue;
    }
    const std::string what = front.what;
    const uint32_t needed = front.last;
    lock.unlock();
    Status failure;
    int cause = -1;
    bool application_abort = false;
    if (!done.ok()) {
      failure = done.status().WithContext("rank " + std::to_string(rank_) + ": direct " + what);
      cause = rank_;
    } else if (std::chrono::steady_clock::now() - last_probe >= std::chrono::milliseconds(20)) {
      last_probe = std::chrono::steady_clock::now();
      const DirectPeers::Loss loss = peers_->LostPeer(needed);
      if (loss.peer >= 0 && !loss.broke_off) {
        cause = loss.peer;
        failure = Status::RemoteError("rank " + std::to_string(loss.peer) + " is gone (seen by rank " +
                                      std::to_string(rank_) + " on the direct device path: its socket closed while " +
                                      what + " was in flight)");
      } else if (loss.peer >= 0) {
        cause = loss.cause;
        application_abort = loss.application_abort;
        const std::string by = "rank " + std::to_string(loss.cause);
        failure = loss.application_abort
                      ? Status::Aborted(by + " aborted (braidCommAbort; seen by rank " + std::to_string(rank_) +
                                        " on the direct device path during " + what + ")")
                      : Status::RemoteError(by + " failed (rank " + std::to_string(loss.peer) +
                                            " broke off the direct device path; seen by rank " +
                                            std::to_string(rank_) + " during " + what + ")");
      } else if (deadline.Expired()) {
        cause = rank_;
        failure = Status::Timeout("rank " + std::to_string(rank_) + ": direct " + what + " did not complete within " +
                                  std::to_string(options_.timeout_ms) + " ms");
      }
    }
    if (!failure.ok()) {
      {
        // Failing the communicator releases this path (Break), which is to name this cause.
        std::lock_guard<std::mutex> noted(mu_);
        noted_cause_ = cause;
        noted_abort_ = application_abort;
      }
      options_.fail(failure);
      ReleaseAll(cause, application_abort);
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(++looks < 200 ? 100 : 2000));
    lock.lock();
  }
}

}  // namespace braid::device_path
