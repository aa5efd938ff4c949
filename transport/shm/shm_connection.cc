// The shm data path (see shm_connection.h for the protocol and why the waiting thread moves the
// data).
#include "transport/shm/shm_connection.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "core/base/logging.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/ring_size.h"
#include "transport/shm/wait.h"
#include "transport/shm/wire.h"

namespace braid::transport::shm {
namespace {

// A message is cut into ring pieces of at least this size (or its whole size if smaller), so
// small messages are never split and large ones stream without tiny fragments.
constexpr uint64_t kMinPiece = 4096;
// Every piece but a message's last is a multiple of this, so a piece never splits an element: a
// consumer that reduces as pieces land (PostRecvInto) then never carries one over.
constexpr uint64_t kPieceAlign = 64;

// A finished request's status for a waiter. Most finish OK, and a fresh OK status is cheaper
// than copying one (no string copy); this runs once per message waited for.
Status OutcomeOf(const Request& request) {
  return request.status().ok() ? Status::Ok() : request.status();
}

RequestPtr FinishedRequest(const Status& status) {
  auto request = std::make_shared<Request>();
  request->Complete(status);
  return request;
}

// The request every post that finishes OK on the spot returns. It is never freed and is handed
// out through a shared_ptr that owns nothing (the aliasing constructor with an empty owner), so
// copying and dropping it touch no reference count: two locked instructions less per small
// message than a counted request. A complete request never changes, so one serves every channel
// and thread, and a holder can outlive the channel it came from.
RequestPtr CompletedOkRequest() {
  static Request* const request = [] {
    auto* finished = new Request();  // never freed, see above
    finished->Complete(Status::Ok());
    return finished;
  }();
  return RequestPtr(RequestPtr(), request);
}

}  // namespace

std::shared_ptr<ShmChannel> ShmChannel::Create(ChannelSetup setup) {
  return std::shared_ptr<ShmChannel>(new ShmChannel(std::move(setup)));
}

ShmChannel::ShmChannel(ChannelSetup setup)
    : rank_(setup.rank),
      peer_(setup.peer),
      side_(setup.side),
      socket_(setup.socket),
      segment_(std::move(setup.segment)),
      own_(&segment_.header()->side[side_]),
      other_(&segment_.header()->side[1 - side_]),
      out_(&segment_.header()->ring[side_]),
      in_(&segment_.header()->ring[1 - side_]),
      in_data_(segment_.ring_data(1 - side_)),
      ring_bytes_(segment_.header()->ring_bytes),
      remote_min_bytes_(setup.remote_min_bytes),
      peer_reads_us_(setup.peer_reads_us),
      we_read_peer_(setup.we_read_peer),
      same_process_(setup.same_process),
      peer_pid_(setup.peer_pid),
      stalled_(std::move(setup.stalled)),
      budget_(setup.budget),
      done_(CompletedOkRequest()),
      // A ring larger than the cache-resident size keeps to it while the peer keeps up.
      writer_(out_, segment_.ring_data(side_), ring_bytes_, kCacheResidentRingBytes),
      reader_(in_, in_data_, ring_bytes_) {}

ShmChannel::~ShmChannel() {
  if (socket_ >= 0) ::close(socket_);
}

const char* ShmChannel::large_message_path() const {
  if (!peer_reads_us_ || remote_min_bytes_ == UINT64_MAX) return "ring";
  return same_process_ ? "memcpy" : "process_vm_readv";
}

std::string ShmChannel::LostMessage(const std::string& why) const {
  return "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer_) +
         " lost: " + why;
}

std::string ShmChannel::MismatchMessage(uint64_t want_tag, uint64_t want_bytes, uint64_t tag,
                                        uint64_t bytes) const {
  return "rank " + std::to_string(rank_) + ": receive from rank " + std::to_string(peer_) +
         " expected tag " + std::to_string(want_tag) + " and " + std::to_string(want_bytes) +
         " bytes, but the next message has tag " + std::to_string(tag) + " and " +
         std::to_string(bytes) + " bytes";
}

// Callers run a sequentially consistent fence first (WakePeer's, or ProgressRecvLocked's own):
// it orders our tail store before this load, pairing with the producer's arm-then-recheck
// (ArmDoorbellLocked), so either the producer sees the space or we see its request.
void ShmChannel::RingDoorbellIfAsked() {
  if (in_->want_doorbell.load(std::memory_order_relaxed) != 0 &&
      in_->want_doorbell.exchange(0, std::memory_order_seq_cst) != 0) {
    const char bell = kDoorbell;
    (void)::send(socket_, &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

void ShmChannel::WakeSelf() { WakeIfSleeping(&own_->wake_seq, &own_->sleepers); }
void ShmChannel::WakePeer() { WakeIfSleeping(&other_->wake_seq, &other_->sleepers); }

// WakeIfSleeping without its fence, for a caller that has just run one (ProgressRecvLocked wakes
// both sides after one fence instead of paying one per side on every message it completes).
void ShmChannel::WakeSleepersFenced(SideControl* side) {
  if (side->sleepers.load(std::memory_order_relaxed) == 0) return;
  side->wake_seq.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&side->wake_seq);
}

// Every writer of recv_work_ holds recv_lock_ (only Poll reads it without), so a plain load
// and store do what an atomic add would, without the locked instruction on every message.
void ShmChannel::AddRecvWorkLocked(int delta) {
  recv_work_.store(recv_work_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
}

bool ShmChannel::SocketHungUp() const {
  pollfd pfd{socket_, POLLRDHUP, 0};
  if (::poll(&pfd, 1, 0) <= 0) return false;
  return (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

RequestPtr ShmChannel::NewRequest(RequestPool& pool) {
  return pool.Acquire([this] { return std::make_shared<Request>(shared_from_this()); });
}

// ---- send side ----

ShmChannel::Push ShmChannel::PushSend(SendOp& op) {
  uint64_t granted = 0;
  if (peer_reads_us_ && op.bytes >= remote_min_bytes_ && !op.started) {
    char* payload = writer_.Reserve(sizeof(RemoteRef), sizeof(RemoteRef), &granted);
    if (payload == nullptr) return Push::kStalled;
    RemoteRef ref{reinterpret_cast<uint64_t>(op.data), remote_next_};
    AnnotateRelease(op.data);
    std::memcpy(payload, &ref, sizeof(ref));
    writer_.Commit(RecordKind::kRemote, sizeof(ref), op.tag, op.bytes);
    return Push::kRemote;
  }
  if (!op.started && op.bytes <= kLinePayload) {
    // The small-message case: one line, no search for room (ring.h). A full ring falls through
    // to the general path, which finds it full too and stalls the send.
    if (writer_.TryWriteLine(op.data, static_cast<uint32_t>(op.bytes), op.tag)) {
      op.offset = op.bytes;
      op.started = true;
      return Push::kDone;
    }
  }
  do {
    const uint64_t left = op.bytes - op.offset;
    char* payload = writer_.Reserve(std::min(left, kMinPiece), left, &granted);
    if (payload == nullptr) return Push::kStalled;
    if (granted < left) granted -= granted % kPieceAlign;  // >= kMinPiece still
    if (granted > 0) std::memcpy(payload, op.data + op.offset, granted);
    writer_.Commit(op.started ? RecordKind::kMore : RecordKind::kStart,
                   static_cast<uint32_t>(granted), op.tag, op.bytes);
    op.offset += granted;
    op.started = true;
  } while (op.offset < op.bytes);
  return Push::kDone;
}

void ShmChannel::ArmDoorbellLocked() {
  if (out_->want_doorbell.load(std::memory_order_relaxed) == 0) {
    out_->want_doorbell.store(1, std::memory_order_seq_cst);
  }
  (void)ProgressSendLocked(nullptr);
}

void ShmChannel::UpdateSendStateLocked() {
  send_work_.store(static_cast<int>(send_queue_.size() + remote_sends_.size()),
                   std::memory_order_relaxed);
  const bool stalled = !send_queue_.empty();
  const bool listed = listed_.load(std::memory_order_relaxed);
  if (stalled && !listed) {
    listed_.store(true, std::memory_order_relaxed);
    stalled_->Add(shared_from_this());
  } else if (!stalled && listed) {
    listed_.store(false, std::memory_order_relaxed);
    doorbell_mode_ = false;
    stalled_->Remove(this);
  }
}

bool ShmChannel::ProgressSendLocked(bool* completed_out) {
  if (!send_failure_.ok()) return false;
  if (AdoptLinkLossLocked()) {
    if (completed_out != nullptr) *completed_out = true;
    return true;
  }
  bool completed = false;
  const uint64_t done = out_->remote_done.load(std::memory_order_acquire);
  while (!remote_sends_.empty() && remote_sends_.front().sequence < done) {
    AnnotateAcquire(remote_sends_.front().data);
    remote_sends_.front().request->Complete(Status::Ok());
    remote_sends_.pop_front();
    completed = true;
  }
  bool pushed = false;
  while (!send_queue_.empty()) {
    SendOp& op = send_queue_.front();
    const uint64_t offset = op.offset;
    const bool started = op.started;
    Push result = PushSend(op);
    if (op.offset != offset || op.started != started) pushed = true;
    if (result == Push::kStalled) break;
    pushed = true;
    if (result == Push::kRemote) {
      remote_sends_.push_back(RemoteSend{remote_next_++, op.data, std::move(op.request)});
    } else {
      op.request->Complete(Status::Ok());
      completed = true;
    }
    send_queue_.pop_front();
  }
  if (pushed) {
    pushes_.fetch_add(1, std::memory_order_relaxed);
    WakePeer();
  }
  UpdateSendStateLocked();
  if (completed_out != nullptr) *completed_out = completed;
  return pushed || completed;
}

RequestPtr ShmChannel::PostSend(const void* data, size_t bytes, uint64_t tag) {
  std::lock_guard<LightLock> lock(send_lock_);
  if (!send_failure_.ok() || AdoptLinkLossLocked()) return FinishedRequest(send_failure_);
  SendOp op{nullptr, static_cast<const char*>(data), bytes, tag, 0, false};
  if (send_queue_.empty()) {
    Push result = PushSend(op);
    if (result == Push::kDone) {
      WakePeer();
      return done_;
    }
    RequestPtr request = NewRequest(send_pool_);
    if (result == Push::kRemote) {
      WakePeer();
      remote_sends_.push_back(RemoteSend{remote_next_++, op.data, request});
      send_work_.fetch_add(1, std::memory_order_relaxed);
      return request;
    }
    if (op.started) WakePeer();  // the first pieces are in the ring
    op.request = request;
    send_queue_.push_back(op);
    UpdateSendStateLocked();
    return request;
  }
  op.request = NewRequest(send_pool_);
  send_queue_.push_back(op);
  UpdateSendStateLocked();
  return op.request;
}

bool ShmChannel::TryPushSends() {
  if (!send_lock_.try_lock()) return false;
  bool completed = false;
  bool moved = ProgressSendLocked(&completed);
  send_lock_.unlock();
  if (completed) WakeSelf();
  return moved;
}

void ShmChannel::OnDoorbell() {
  bool completed = false;
  {
    std::lock_guard<LightLock> lock(send_lock_);
    (void)ProgressSendLocked(&completed);
    if (doorbell_mode_ && !send_queue_.empty()) ArmDoorbellLocked();
  }
  if (completed) WakeSelf();
}

void ShmChannel::Backstop() {
  const uint64_t pushes = pushes_.load(std::memory_order_relaxed);
  if (pushes != backstop_seen_) {
    backstop_seen_ = pushes;  // somebody is pushing: leave it to them
    return;
  }
  bool completed = false;
  {
    std::lock_guard<LightLock> lock(send_lock_);
    (void)ProgressSendLocked(&completed);
    if (!send_queue_.empty()) {
      doorbell_mode_ = true;
      ArmDoorbellLocked();
    }
  }
  backstop_seen_ = pushes_.load(std::memory_order_relaxed);
  if (completed) WakeSelf();
}

// ---- receive side ----

Status ShmChannel::CopyRemote(const RecvOp& op, uint64_t address, uint64_t bytes) {
  if (bytes == 0) return Status::Ok();
  char* const destination = op.data;
  if (!we_read_peer_) {
    return Status::RemoteError(
        LostMessage("it sent a message by reference but this rank cannot read its memory"));
  }
  const char* abandoned = "it let go of a message before this rank had copied it";
  if (same_process_) {
    // Dekker with Fail() on the sender's side: either we see `abandoned` or it sees us busy and
    // waits, so its buffer stays valid for the whole copy.
    in_->reader_busy.store(1, std::memory_order_seq_cst);
    if (in_->abandoned.load(std::memory_order_seq_cst) != 0) {
      in_->reader_busy.store(0, std::memory_order_release);
      return Status::RemoteError(LostMessage(abandoned));
    }
    AnnotateAcquire(reinterpret_cast<const void*>(address));
    Land(op, 0, reinterpret_cast<const char*>(address), bytes);
    AnnotateRelease(reinterpret_cast<const void*>(address));
    in_->reader_busy.store(0, std::memory_order_release);
    return Status::Ok();
  }
  if (in_->abandoned.load(std::memory_order_acquire) != 0) {
    return Status::RemoteError(LostMessage(abandoned));
  }
  std::string error;
  if (op.sink == nullptr) {
    error = ReadFromProcess(peer_pid_, destination, address, bytes);
  } else {
    // Through a bounce buffer: a sink has no buffer of ours to read into (and an algorithm's
    // destination may be the very data it combines the message with).
    constexpr uint64_t kBounce = 64 << 10;  // a multiple of every element size
    std::vector<char> bounce(std::min(bytes, kBounce));
    for (uint64_t done = 0; done < bytes && error.empty(); done += kBounce) {
      const uint64_t piece = std::min(kBounce, bytes - done);
      error = ReadFromProcess(peer_pid_, bounce.data(), address + done, piece);
      if (error.empty()) Land(op, done, bounce.data(), piece);
    }
  }
  return CheckCopyFromPeer(error, "the buffer it sent by reference", address, bytes, abandoned,
                           "it went away while this rank copied a message");
}

Status ShmChannel::CheckCopyFromPeer(const std::string& error, const char* buffer,
                                     uint64_t address, uint64_t bytes, const char* abandoned,
                                     const char* went_away) const {
  if (!error.empty()) {
    // The address and length are the peer's word: name them, since a bad pair is its fault.
    char where[64];
    std::snprintf(where, sizeof(where), "%#" PRIx64 ", %" PRIu64 " bytes", address, bytes);
    return Status::RemoteError(LostMessage(std::string(buffer) + " (" + where +
                                           ") cannot be read: " + error));
  }
  // The peer may have given up (or died, and its pid been reused) while we copied: then the
  // bytes are not to be trusted.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (in_->abandoned.load(std::memory_order_relaxed) != 0) {
    return Status::RemoteError(LostMessage(abandoned));
  }
  if (SocketHungUp()) return Status::RemoteError(LostMessage(went_away));
  return Status::Ok();
}

Status ShmChannel::ReadPeer(uint64_t address, void* destination, uint64_t bytes) {
  if (!reads_peer_memory()) {
    return Status::InvalidUsage("the shm link to rank " + std::to_string(peer_) +
                                " cannot read the peer's memory (" +
                                (same_process_ ? "a thread of this process"
                                               : "cross-memory attach refused") +
                                ")");
  }
  if (bytes == 0) return Status::Ok();
  const char* abandoned = "it gave up on the operation before this rank had read its buffer";
  if (failed_.load(std::memory_order_acquire)) {
    return Status::RemoteError(LostMessage("this rank's link to it has failed"));
  }
  if (in_->abandoned.load(std::memory_order_acquire) != 0) {
    return Status::RemoteError(LostMessage(abandoned));
  }
  return CheckCopyFromPeer(ReadFromProcess(peer_pid_, destination, address, bytes),
                           "the buffer it offered for reading", address, bytes, abandoned,
                           "it went away while this rank read its buffer");
}

void ShmChannel::FailReceivesLocked(const Status& status) {
  if (active_.request) active_.request->Complete(status);
  active_ = RecvOp{};
  for (RecvOp& op : recv_queue_) op.request->Complete(status);
  recv_queue_.clear();
  recv_work_.store(0, std::memory_order_relaxed);
}

bool ShmChannel::ProgressRecvLocked() {
  if (!recv_failure_.ok()) return false;
  // Read before looking at the ring: once the peer is known gone, everything it wrote is visible.
  const bool gone = peer_gone_.load(std::memory_order_acquire);
  bool consumed = false;
  bool acked = false;
  bool completed = false;
  for (;;) {
    const RecordHeader* record = reader_.Peek();
    if (record == nullptr) break;
    const RecordKind kind = record->kind;
    if (kind == RecordKind::kMore) {
      const uint64_t length = record->length;
      if (active_.request) {
        if (active_offset_ + length > active_.bytes) {
          recv_failure_ = Status::RemoteError(LostMessage("message pieces out of step"));
          break;
        }
        Land(active_, active_offset_, RingReader::Payload(record), length);
        active_offset_ += length;
        if (active_offset_ == active_.bytes) {
          active_.request->Complete(Status::Ok());
          active_ = RecvOp{};
          AddRecvWorkLocked(-1);
          completed = true;
        }
      } else if (discarding_ && length <= discard_left_) {
        discard_left_ -= length;
        discarding_ = discard_left_ > 0;
      } else {
        recv_failure_ = Status::RemoteError(LostMessage("unexpected message piece"));
        break;
      }
      reader_.Consume(record);
      consumed = true;
      continue;
    }
    if (kind != RecordKind::kStart && kind != RecordKind::kRemote) {
      recv_failure_ = Status::RemoteError(LostMessage("unknown record in the ring"));
      break;
    }
    if (active_.request || discarding_) {
      recv_failure_ = Status::RemoteError(LostMessage("a message started inside another"));
      break;
    }
    if (recv_queue_.empty()) break;  // the message waits in the ring for its receive
    RecvOp op = std::move(recv_queue_.front());
    recv_queue_.pop_front();
    const uint64_t tag = record->tag;
    const uint64_t total = record->total;
    const uint64_t length = record->length;
    if (op.tag != tag || op.bytes != total) {
      Status status = Status::Internal(MismatchMessage(op.tag, op.bytes, tag, total));
      BRAID_LOG(kWarn, rank_) << status.message();
      op.request->Complete(status);
      AddRecvWorkLocked(-1);
      completed = true;
      if (kind == RecordKind::kRemote) {
        ++remote_acked_;  // the sender's send still completes, as it would over TCP
        acked = true;
      } else {
        discard_left_ = total - length;
        discarding_ = discard_left_ > 0;
      }
    } else if (kind == RecordKind::kRemote) {
      RemoteRef ref;
      std::memcpy(&ref, RingReader::Payload(record), sizeof(ref));
      Status status = CopyRemote(op, ref.address, total);
      reader_.Consume(record);
      consumed = true;
      if (!status.ok()) {
        // The peer's memory could not be read (it died, or let go of the buffer): the link is
        // lost, not just this message. Not acknowledged, so a living sender's send fails too.
        recv_queue_.push_front(std::move(op));
        recv_failure_ = std::move(status);
        break;
      }
      ++remote_acked_;
      acked = true;
      op.request->Complete(Status::Ok());
      AddRecvWorkLocked(-1);
      completed = true;
      continue;
    } else {
      Land(op, 0, RingReader::Payload(record), length);
      if (length == total) {
        op.request->Complete(Status::Ok());
        AddRecvWorkLocked(-1);
        completed = true;
      } else {
        active_ = std::move(op);
        active_offset_ = length;
      }
    }
    reader_.Consume(record);
    consumed = true;
  }
  if (acked) in_->remote_done.store(remote_acked_, std::memory_order_release);
  if (!recv_failure_.ok()) {
    BRAID_LOG(kWarn, rank_) << recv_failure_.message();
    FailReceivesLocked(recv_failure_);
    NoteLinkLostLocked(recv_failure_);
    completed = true;
  } else if (gone && (active_.request || !recv_queue_.empty()) && reader_.Peek() == nullptr) {
    recv_failure_ = peer_gone_status_;
    FailReceivesLocked(recv_failure_);
    completed = true;
  }
  if (consumed || completed) {
    // One fence for both wake-ups (see WakeIfSleeping): it orders our tail store and the
    // completions above before the sleeper checks, and RingDoorbellIfAsked relies on it too.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (consumed) {
      WakeSleepersFenced(other_);  // space freed, remote copies done: the producer may wait
      RingDoorbellIfAsked();
    }
    // Another thread of ours may sleep on one of these requests.
    if (completed) WakeSleepersFenced(own_);
  }
  return consumed || completed;
}

RequestPtr ShmChannel::PostRecv(void* data, size_t bytes, uint64_t tag) {
  return PostReceive(RecvOp{nullptr, static_cast<char*>(data), bytes, tag});
}

RequestPtr ShmChannel::PostRecvInto(size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink) {
  return PostReceive(RecvOp{nullptr, nullptr, bytes, tag, std::move(sink)});
}

bool ShmChannel::IsWholeMessage(const RecordHeader* record, uint64_t tag, uint64_t bytes) {
  return record != nullptr && record->kind == RecordKind::kStart && record->tag == tag &&
         record->total == bytes && record->length == bytes;
}

void ShmChannel::ConsumeLocked(const RecordHeader* record) {
  reader_.Consume(record);
  WakePeer();  // its fence also orders the tail store before RingDoorbellIfAsked's load
  RingDoorbellIfAsked();
}

RequestPtr ShmChannel::PostReceive(RecvOp op) {
  std::lock_guard<LightLock> lock(recv_lock_);
  if (!recv_failure_.ok()) return FinishedRequest(recv_failure_);
  bool ring_empty = false;  // nothing for this receive to match yet, so no progress to try
  // A message sent by reference at the head: its copy out of the peer's memory is left to the
  // wait. Made here it would run before the caller posts its own sends (a batch posts receives
  // first), so in an exchange each rank would copy only after the other had finished, one
  // direction at a time (seen: strace showed the two ranks' process_vm_readv calls alternating).
  bool remote_at_head = false;
  if (recv_queue_.empty() && !active_.request && !discarding_) {
    // Read before the ring, as ProgressRecvLocked does: a peer known gone has written all it will.
    const bool gone = peer_gone_.load(std::memory_order_acquire);
    // Fast path: the whole message is already waiting at the head of the ring.
    const RecordHeader* record = reader_.Peek();
    if (IsWholeMessage(record, op.tag, op.bytes)) {
      Land(op, 0, RingReader::Payload(record), op.bytes);
      ConsumeLocked(record);
      return done_;
    }
    // The usual slow case (the peer's message has not landed): queue it and let the wait poll.
    // A gone peer still goes through ProgressRecvLocked, which fails the receive at once.
    ring_empty = record == nullptr && !gone;
    remote_at_head = record != nullptr && record->kind == RecordKind::kRemote;
  }
  RequestPtr request = NewRequest(recv_pool_);
  op.request = request;
  recv_queue_.push_back(std::move(op));
  AddRecvWorkLocked(1);
  if (!ring_empty && !remote_at_head) (void)ProgressRecvLocked();
  return request;
}

bool ShmChannel::SendWhole(const void* data, size_t bytes, uint64_t tag) {
  {
    std::lock_guard<LightLock> lock(send_lock_);
    // A queued send must leave first; a failed or lost link gets its error from PostSend.
    if (!send_failure_.ok() || link_lost_.load(std::memory_order_acquire) ||
        !send_queue_.empty() || (peer_reads_us_ && bytes >= remote_min_bytes_)) {
      return false;
    }
    if (bytes <= kLinePayload) {
      if (!writer_.TryWriteLine(data, static_cast<uint32_t>(bytes), tag)) return false;
    } else {
      uint64_t granted = 0;
      char* payload = writer_.Reserve(bytes, bytes, &granted);
      if (payload == nullptr) return false;  // no room: PostSend queues it
      std::memcpy(payload, data, bytes);
      writer_.Commit(RecordKind::kStart, static_cast<uint32_t>(bytes), tag, bytes);
    }
  }
  WakePeer();
  return true;
}

bool ShmChannel::ReceiveWhole(void* data, size_t bytes, uint64_t tag) {
  // Bounded by polls, not by a clock: the dedicated budget's spin lasts 100 us, and this is a
  // part of it (~1024 polls of a few tens of ns); the wait that takes over spins on.
  const int polls = budget_.spin_ns > 0 ? 1024 : 1;
  for (int i = 0; i < polls; ++i) {
    if (RingReader::MaybeReady(in_, in_data_, ring_bytes_)) {
      if (!recv_lock_.try_lock()) return false;
      bool landed = false;
      if (recv_failure_.ok() && recv_queue_.empty() && !active_.request && !discarding_) {
        const RecordHeader* record = reader_.Peek();
        if (IsWholeMessage(record, tag, bytes)) {
          if (bytes <= kLinePayload) {
            CopyLinePayload(data, RingReader::Payload(record), bytes);
          } else {
            std::memcpy(data, RingReader::Payload(record), bytes);
          }
          ConsumeLocked(record);
          landed = true;
        }
      }
      recv_lock_.unlock();
      return landed;
    }
    CpuRelax();
  }
  return false;
}

Result<std::optional<Connection::Incoming>> ShmChannel::Probe() {
  // Progress as Test() would: this side's queued sends, and other channels' stalled ones (a
  // prober may be the only thread of its rank that drives this transport).
  if (send_work_.load(std::memory_order_relaxed) > 0) (void)TryPushSends();
  const int stalled = stalled_->count();
  if (stalled > 1 || (stalled == 1 && !listed_.load(std::memory_order_relaxed))) {
    (void)stalled_->PushAll();
  }
  std::lock_guard<LightLock> lock(recv_lock_);
  // Read before the ring, as ProgressRecvLocked does: a peer known gone has written all it will.
  const bool gone = peer_gone_.load(std::memory_order_acquire);
  // Drops what is left of a refused message, completes receives that can complete, and finds a
  // broken ring; it stops at a message's first record when no receive is posted for it.
  (void)ProgressRecvLocked();
  if (!recv_failure_.ok()) return recv_failure_;
  if (active_.request || !recv_queue_.empty()) {
    return Status::Internal("rank " + std::to_string(rank_) + ": probe of the connection to rank " +
                            std::to_string(peer_) +
                            " while a receive is pending on it (the next message is that receive's)");
  }
  const RecordHeader* record = discarding_ ? nullptr : reader_.Peek();
  if (record == nullptr) {
    if (gone) return peer_gone_status_;
    return std::optional<Connection::Incoming>();
  }
  // ProgressRecvLocked failed the link on anything but a message's first record at the tail.
  Connection::Incoming incoming;
  incoming.tag = record->tag;
  incoming.bytes = static_cast<size_t>(record->total);
  return std::optional<Connection::Incoming>(incoming);
}

// Copies the bytes into place, or hands them, still in the ring (or the peer's buffer), to the
// receive's sink. Pieces reach it in order, each once (ProgressRecvLocked walks them in order
// under the receive lock).
void ShmChannel::Land(const RecvOp& op, uint64_t offset, const char* bytes, uint64_t length) {
  if (length == 0) return;
  if (op.sink == nullptr) {
    std::memcpy(op.data + offset, bytes, length);
    return;
  }
  op.sink->Land(offset, bytes, length);
}

// ---- progress and waiting ----

bool ShmChannel::Poll() {
  bool moved = false;
  if (recv_work_.load(std::memory_order_relaxed) > 0 &&
      (RingReader::MaybeReady(in_, in_data_, ring_bytes_) ||
       peer_gone_.load(std::memory_order_relaxed))) {
    if (recv_lock_.try_lock()) {
      moved = ProgressRecvLocked();
      recv_lock_.unlock();
    }
  }
  if (send_work_.load(std::memory_order_relaxed) > 0) moved |= TryPushSends();
  // Other connections' sends waiting for space (see StalledSends); skipped when the only one
  // listed is this channel, pushed just above.
  const int stalled = stalled_->count();
  if (stalled > 1 || (stalled == 1 && !listed_.load(std::memory_order_relaxed))) {
    moved |= stalled_->PushAll();
  }
  return moved;
}

void ShmChannel::Progress() { (void)Poll(); }

Status ShmChannel::Wait(const Request& request, Deadline deadline) {
  // One look before reading any clock: small messages often have arrived by the time their
  // receive is waited for, and the two clock reads below would then be all the wait costs.
  (void)Poll();
  if (request.IsDone()) return OutcomeOf(request);
  int64_t now = NowNs();
  const int64_t end = EndNs(deadline, now);
  // The phases restart whenever data moves: a long transfer in many ring pieces keeps both
  // sides spinning rather than paying a futex wake-up per piece.
  int64_t phase_start = now;
  for (int i = 0;; ++i) {
    const bool moved = Poll();
    if (request.IsDone()) return OutcomeOf(request);
    if (moved || (i & 15) == 15) {
      now = NowNs();
      if (moved) phase_start = now;
    }
    if (now >= end) {
      return Status::Timeout("rank " + std::to_string(rank_) +
                             ": request on the shm connection to rank " + std::to_string(peer_) +
                             " did not complete before the deadline");
    }
    const WaitStep step = budget_.SpinOrYield(now - phase_start);
    if (step == WaitStep::kYielded) now = NowNs();  // a yield may take long: no stale clock
    if (step != WaitStep::kSleep) continue;
    // Phase 3: announce, re-check, sleep on the futex.
    own_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seq = own_->wake_seq.load(std::memory_order_seq_cst);
    const bool moved_now = Poll();
    if (!moved_now && !request.IsDone()) {
      FutexWait(&own_->wake_seq, seq, std::min(end - now, kMaxSleepNs));
    }
    own_->sleepers.fetch_sub(1, std::memory_order_relaxed);
    now = NowNs();
    // After a wake-up without news, yield-poll again before the next sleep.
    phase_start = moved_now ? now : now - budget_.spin_ns;
  }
}

// ---- failure ----

void ShmChannel::Fail(const Status& reason, bool goodbye) {
  {
    std::lock_guard<LightLock> send_lock(send_lock_);
    std::lock_guard<LightLock> recv_lock(recv_lock_);
    if (failed_.load()) return;
    if (goodbye && !reason.ok()) {
      // One packet, best effort (a full socket buffer gets none): the peer then reads a plain
      // end of file.
      std::string packet(1, kGoodbye);
      packet.append(reason.message(), 0, kMaxGoodbyeBytes);
      (void)::send(socket_, packet.data(), packet.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    out_->abandoned.store(1, std::memory_order_seq_cst);
    if (same_process_) {
      // The peer thread may be copying out of one of our buffers right now (see CopyRemote).
      while (out_->reader_busy.load(std::memory_order_seq_cst) != 0) sched_yield();
    }
    FailSendsLocked(reason);
    if (recv_failure_.ok()) recv_failure_ = reason;
    FailReceivesLocked(reason);
    // Later posts fail on the spot; the pools' requests own this channel (see request_pool.h).
    send_pool_.Clear();
    recv_pool_.Clear();
    failed_.store(true);
  }
  ::shutdown(socket_, SHUT_RDWR);  // the peer sees end of file; our control thread lets go
  WakeSelf();
}

void ShmChannel::FailSendsLocked(const Status& reason) {
  if (!send_failure_.ok()) return;
  // Sends the peer finished copying did succeed.
  const uint64_t done = out_->remote_done.load(std::memory_order_acquire);
  for (RemoteSend& send : remote_sends_) {
    send.request->Complete(send.sequence < done ? Status::Ok() : reason);
  }
  remote_sends_.clear();
  for (SendOp& op : send_queue_) op.request->Complete(reason);
  send_queue_.clear();
  UpdateSendStateLocked();
  send_failure_ = reason;
}

// The send lock cannot be taken under the receive lock (see the lock order), so the news goes
// through link_lost_ and the send side adopts it at its next step (AdoptLinkLossLocked). Shutting
// the socket down tells the peer, which would otherwise wait on a link this side has given up.
void ShmChannel::NoteLinkLostLocked(const Status& reason) {
  if (link_lost_.load(std::memory_order_relaxed)) return;
  link_lost_status_ = reason;
  link_lost_.store(true, std::memory_order_release);
  ::shutdown(socket_, SHUT_RDWR);
}

bool ShmChannel::AdoptLinkLossLocked() {
  if (!link_lost_.load(std::memory_order_acquire)) return false;
  FailSendsLocked(link_lost_status_);
  return true;
}

void ShmChannel::OnPeerGone(const Status& reason) {
  if (peer_gone_.load()) return;
  {
    std::lock_guard<LightLock> send_lock(send_lock_);
    peer_gone_status_ = reason;
    peer_gone_.store(true, std::memory_order_release);
    FailSendsLocked(reason);
  }
  {
    std::lock_guard<LightLock> recv_lock(recv_lock_);
    (void)ProgressRecvLocked();  // hands over what is left in the ring, then fails the rest
  }
  WakeSelf();
}

// ---- ShmConnection ----

ShmConnection::ShmConnection(std::shared_ptr<ShmChannel> channel) : channel_(std::move(channel)) {}

ShmConnection::~ShmConnection() {
  channel_->Fail(Status::Aborted("rank " + std::to_string(channel_->rank()) +
                                 ": connection to rank " + std::to_string(channel_->peer()) +
                                 " was destroyed"));
}

RequestPtr ShmConnection::PostSend(const void* data, size_t bytes, uint64_t tag) {
  return channel_->PostSend(data, bytes, tag);
}

RequestPtr ShmConnection::PostRecv(void* data, size_t bytes, uint64_t tag) {
  return channel_->PostRecv(data, bytes, tag);
}

RequestPtr ShmConnection::PostRecvInto(size_t bytes, uint64_t tag,
                                       std::shared_ptr<LandingSink> sink) {
  return channel_->PostRecvInto(bytes, tag, std::move(sink));
}

Result<std::optional<Connection::Incoming>> ShmConnection::Probe() { return channel_->Probe(); }

bool ShmConnection::ReadsPeerMemory() const { return channel_->reads_peer_memory(); }

Status ShmConnection::ReadPeerMemory(uint64_t address, void* destination, size_t bytes) {
  return channel_->ReadPeer(address, destination, bytes);
}

Status ShmConnection::SendRecv(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                               uint64_t tag, Deadline deadline, Half* failed) {
  const bool small = send_bytes > 0 && send_bytes <= kWholeMessageBytes && recv_bytes > 0 &&
                     recv_bytes <= kWholeMessageBytes;
  if (!small || !channel_->SendWhole(send, send_bytes, tag)) {
    return Connection::SendRecv(send, send_bytes, recv, recv_bytes, tag, deadline, failed);
  }
  if (channel_->ReceiveWhole(recv, recv_bytes, tag)) return Status::Ok();
  Status status = channel_->PostRecv(recv, recv_bytes, tag)->Wait(deadline);
  if (!status.ok()) *failed = Half::kReceive;
  return status;
}

void ShmConnection::Close(const Status& reason) {
  channel_->Fail(reason.ok() ? Status::Aborted("rank " + std::to_string(channel_->rank()) +
                                               ": connection to rank " +
                                               std::to_string(channel_->peer()) + " closed")
                             : reason);
}

}  // namespace braid::transport::shm
