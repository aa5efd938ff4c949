// The TCP data path (see tcp_connection.h for the protocol and why the waiting thread moves the
// bytes).
#include "transport/tcp/tcp_connection.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "core/base/logging.h"

namespace braid::transport::tcp {
namespace {

// Small messages are read through this buffer, several per readv (and a refused message's
// payload is dropped through it).
constexpr size_t kStagingBytes = size_t{64} << 10;
// Receives from this size up get their payload read straight into the caller's buffer; below it
// the copy out of the staging buffer costs less than the extra readv.
constexpr size_t kDirectRecvBytes = size_t{16} << 10;
// One gather write carries at most this many iovecs (two per message).
constexpr int kMaxSendIov = 64;
// A sleeping waiter wakes at least this often (a safety net; wake-ups come through the eventfd).
constexpr int64_t kMaxSleepNs = 100'000'000;
// ...and this often when its thread could not get an eventfd.
constexpr int64_t kMaxSleepNoWakeFdNs = 10'000'000;

RequestPtr FailedRequest(const Status& status) {
  auto request = std::make_shared<Request>();
  request->Complete(status);
  return request;
}

// One completed request per thread, returned by posts that finish on the spot: most small
// messages then cost no allocation. Requests are immutable once complete, so sharing is safe.
const RequestPtr& DoneRequest() {
  thread_local const RequestPtr done = FailedRequest(Status::Ok());
  return done;
}

// The eventfd a thread sleeping in TcpDriver::Wait is woken through: made at the first sleep of
// a Wait() and closed when it returns, so that no descriptor outlives the wait (a sleep follows
// at least the spin and yield phases, which dwarf the two syscalls). -1 if none could be made
// (the thread then sleeps in short slices).
class WakeFd {
 public:
  WakeFd() = default;
  ~WakeFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;
  int Get() {
    if (fd_ == -2) fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fd_;
  }

 private:
  int fd_ = -2;  // -2: not made yet
};

bool WouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK; }

}  // namespace

// ---- TcpDriver ----

TcpDriver::TcpDriver(int rank, WaitBudget budget)
    : rank_(rank), budget_(budget), channels_(std::make_shared<const ChannelList>()) {}

std::shared_ptr<const TcpDriver::ChannelList> TcpDriver::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return channels_;
}

void TcpDriver::Add(const std::shared_ptr<TcpChannel>& channel) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto list = std::make_shared<ChannelList>(*channels_);
  list->push_back(channel);
  channels_ = std::move(list);
}

void TcpDriver::Remove(const TcpChannel* channel) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto list = std::make_shared<ChannelList>();
  for (const auto& c : *channels_) {
    if (c.get() != channel) list->push_back(c);
  }
  channels_ = std::move(list);
}

void TcpDriver::FailAll(const Status& reason) {
  for (const auto& channel : *Snapshot()) channel->Fail(reason, /*goodbye=*/true);
  WakeSleepers();
}

bool TcpDriver::Poll() {
  bool moved = false;
  std::shared_ptr<const ChannelList> list = Snapshot();
  for (const auto& channel : *list) {
    if (channel->has_recv_work() || channel->has_send_work()) moved |= channel->Drive();
  }
  drives_.fetch_add(1, std::memory_order_relaxed);
  return moved;
}

void TcpDriver::Progress() { (void)Poll(); }

void TcpDriver::WakeSleepers() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(sleep_mutex_);
  const uint64_t one = 1;
  for (int fd : sleeper_fds_) (void)!::write(fd, &one, sizeof(one));
}

Status TcpDriver::Wait(const Request& request, Deadline deadline) {
  int64_t now = NowNs();
  const int64_t end = EndNs(deadline, now);
  // The phases restart whenever data moves, so a long transfer keeps the waiter spinning
  // instead of sleeping between socket buffers.
  int64_t phase_start = now;
  WakeFd wake;
  for (;;) {
    const bool moved = Poll();
    if (request.IsDone()) return request.status();
    now = NowNs();
    if (moved) phase_start = now;
    if (now >= end) {
      return Status::Timeout("rank " + std::to_string(rank_) +
                             ": request on a tcp connection did not complete before the deadline");
    }
    if (budget_.SpinOrYield(now - phase_start) != WaitStep::kSleep) continue;
    // Phase 3: announce, re-check, sleep in poll().
    const int wake_fd = wake.Get();
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      if (wake_fd >= 0) sleeper_fds_.push_back(wake_fd);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const bool moved_now = Poll();
    if (!moved_now && !request.IsDone()) {
      Sleep(std::min(end - now, wake_fd >= 0 ? kMaxSleepNs : kMaxSleepNoWakeFdNs), wake_fd);
    }
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      if (wake_fd >= 0) {
        sleeper_fds_.erase(std::find(sleeper_fds_.begin(), sleeper_fds_.end(), wake_fd));
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    now = NowNs();
    // After a wake-up, yield-poll again before the next sleep.
    phase_start = moved_now ? now : now - budget_.spin_ns;
  }
}

void TcpDriver::Sleep(int64_t timeout_ns, int wake_fd) {
  std::shared_ptr<const ChannelList> list = Snapshot();
  std::vector<pollfd> fds;
  std::vector<TcpChannel*> owners;
  fds.reserve(list->size() + 1);
  owners.reserve(list->size() + 1);
  for (const auto& channel : *list) {
    if (channel->failed()) continue;
    const bool recv_work = channel->has_recv_work();
    short events = 0;
    if (recv_work) events |= POLLIN;  // also reports end of file and errors
    if (channel->has_send_work()) events |= POLLOUT;
    // Without receives posted, a hang-up would go unnoticed: watch for it (once).
    if (!recv_work && channel->watch_hangup()) events |= POLLRDHUP;
    if (events == 0) continue;
    fds.push_back(pollfd{channel->fd(), events, 0});
    owners.push_back(channel.get());
  }
  if (wake_fd >= 0) {
    fds.push_back(pollfd{wake_fd, POLLIN, 0});
    owners.push_back(nullptr);
  }
  const int timeout_ms = static_cast<int>(std::max<int64_t>(1, (timeout_ns + 999'999) / 1'000'000));
  const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (wake_fd >= 0) {
    uint64_t count;
    (void)!::read(wake_fd, &count, sizeof(count));
  }
  if (ready <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (owners[i] != nullptr && (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 &&
        !owners[i]->has_recv_work()) {
      owners[i]->OnIdleHangup();
    }
  }
}

void TcpDriver::SetKick(std::function<void()> kick) {
  std::lock_guard<std::mutex> lock(kick_mutex_);
  kick_ = std::move(kick);
}

void TcpDriver::SendsStalled(int delta) {
  stalled_.fetch_add(delta, std::memory_order_seq_cst);
  if (delta <= 0 || checking_.load(std::memory_order_seq_cst) || checking_.exchange(true)) return;
  std::lock_guard<std::mutex> lock(kick_mutex_);
  if (kick_) {
    kick_();
  } else {
    checking_.store(false);  // no io thread any more (the transport is gone)
  }
}

bool TcpDriver::Backstop() {
  if (stalled_.load(std::memory_order_seq_cst) == 0) {
    checking_.store(false, std::memory_order_seq_cst);
    // A send that stalled meanwhile either saw checking_ set (and did not kick) or sees it
    // clear and kicks: take the check back in the first case.
    if (stalled_.load(std::memory_order_seq_cst) == 0 || checking_.exchange(true)) return false;
  }
  const uint64_t drives = drives_.load(std::memory_order_relaxed);
  if (drives != backstop_seen_) {
    backstop_seen_ = drives;  // somebody drives: leave it to them
    return true;
  }
  (void)Poll();
  backstop_seen_ = drives_.load(std::memory_order_relaxed);
  return true;
}

// ---- TcpChannel ----

std::shared_ptr<TcpChannel> TcpChannel::Create(int fd, int rank, int peer,
                                               std::shared_ptr<TcpDriver> driver) {
  return std::shared_ptr<TcpChannel>(new TcpChannel(fd, rank, peer, std::move(driver)));
}

TcpChannel::TcpChannel(int fd, int rank, int peer, std::shared_ptr<TcpDriver> driver)
    : fd_(fd),
      rank_(rank),
      peer_(peer),
      driver_(std::move(driver)),
      staging_(new char[kStagingBytes]) {}

TcpChannel::~TcpChannel() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpChannel::LostMessage(const std::string& why) const {
  return "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer_) +
         " lost: " + why;
}

Status TcpChannel::TakeGoodbyeLocked(const MessageHeader& header) {
  if (header.bytes > kMaxGoodbyeBytes) {
    return Status::RemoteError(LostMessage("received a goodbye of " + std::to_string(header.bytes) +
                                           " bytes, more than a goodbye may have (stream out of step)"));
  }
  const size_t staged = staged_end_ - staged_begin_;
  std::string text;
  // Staged (ProgressRecvLocked, Probe) or only peeked (OnIdleHangup): skip the header either way.
  if (staged >= sizeof(header)) {
    const size_t have = std::min<size_t>(staged - sizeof(header), header.bytes);
    text.assign(staging_.get() + staged_begin_ + sizeof(header), have);
    staged_begin_ += sizeof(header) + have;
  } else {
    MessageHeader skipped;
    (void)::recv(fd_, &skipped, sizeof(skipped), MSG_DONTWAIT);
  }
  // The sender wrote it in one piece before shutting down, so the rest is normally here already.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (text.size() < header.bytes && std::chrono::steady_clock::now() < give_up) {
    char piece[512];
    const size_t want = std::min(sizeof(piece), static_cast<size_t>(header.bytes) - text.size());
    const ssize_t got = ::recv(fd_, piece, want, MSG_DONTWAIT);
    if (got > 0) {
      text.append(piece, static_cast<size_t>(got));
    } else if (got == 0 || (!WouldBlock(errno) && errno != EINTR)) {
      break;
    } else {
      pollfd pfd{fd_, POLLIN, 0};
      (void)::poll(&pfd, 1, 10);
    }
  }
  return Status::RemoteError(LostMessage("rank " + std::to_string(peer_) +
                                         " closed the link and said why: " + text));
}

Status TcpChannel::SocketError(int error, const char* doing) const {
  const std::string what = error == EPIPE || error == ECONNRESET
                               ? std::string("the peer reset the connection (") +
                                     std::strerror(error) + ")"
                               : std::string(std::strerror(error));
  return Status::RemoteError(LostMessage(what + " (while " + doing + ")"));
}

void TcpChannel::FailFromDriving(const Status& status) {
  if (!failed()) {
    BRAID_LOG(kInfo, rank_) << status.message();
  }
  Fail(status);
}

// ---- send side ----

void TcpChannel::UpdateSendStateLocked() {
  send_work_.store(static_cast<int>(send_queue_.size()), std::memory_order_relaxed);
  const bool stalled = !send_queue_.empty();
  if (stalled != send_listed_) {
    send_listed_ = stalled;
    driver_->SendsStalled(stalled ? 1 : -1);
  }
}

Status TcpChannel::PushSendsLocked(bool* moved, bool* completed) {
  if (!send_failure_.ok()) return Status::Ok();
  Status error;
  while (!send_queue_.empty()) {
    iovec iov[kMaxSendIov];
    int count = 0;
    size_t want = 0;
    for (SendOp& op : send_queue_) {
      if (count + 2 > kMaxSendIov) break;
      size_t skip = op.offset;
      if (skip < sizeof(op.header)) {
        iov[count].iov_base = reinterpret_cast<char*>(&op.header) + skip;
        iov[count].iov_len = sizeof(op.header) - skip;
        want += iov[count++].iov_len;
        skip = 0;
      } else {
        skip -= sizeof(op.header);
      }
      if (op.header.bytes > skip) {
        iov[count].iov_base = const_cast<char*>(op.data) + skip;
        iov[count].iov_len = op.header.bytes - skip;
        want += iov[count++].iov_len;
      }
    }
    msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t sent = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (!WouldBlock(errno)) error = SocketError(errno, "sending");
      break;
    }
    *moved = true;
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      SendOp& op = send_queue_.front();
      const size_t total = sizeof(op.header) + op.header.bytes;
      const size_t take = std::min(left, total - op.offset);
      op.offset += take;
      left -= take;
      if (op.offset < total) break;
      op.request->Complete(Status::Ok());
      *completed = true;
      send_queue_.pop_front();
    }
    if (static_cast<size_t>(sent) < want) break;  // the socket is full
  }
  UpdateSendStateLocked();
  return error;
}

RequestPtr TcpChannel::PostSend(const void* data, size_t bytes, uint64_t tag) {
  bool moved = false;
  bool completed = false;
  Status error;
  RequestPtr request;
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    if (!send_failure_.ok()) return FailedRequest(send_failure_);
    SendOp op{nullptr, MessageHeader{}, static_cast<const char*>(data), 0};
    op.header.tag = tag;
    op.header.bytes = bytes;
    if (send_queue_.empty()) {
      // Nothing ahead of it: straight from the caller's buffer into the kernel.
      iovec iov[2];
      iov[0].iov_base = &op.header;
      iov[0].iov_len = sizeof(op.header);
      iov[1].iov_base = const_cast<void*>(data);
      iov[1].iov_len = bytes;
      msghdr msg = {};
      msg.msg_iov = iov;
      msg.msg_iovlen = bytes > 0 ? 2 : 1;
      ssize_t sent;
      do {
        sent = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      } while (sent < 0 && errno == EINTR);
      if (sent == static_cast<ssize_t>(sizeof(op.header) + bytes)) return DoneRequest();
      if (sent < 0 && !WouldBlock(errno)) {
        error = SocketError(errno, "sending");
      } else {
        op.offset = sent > 0 ? static_cast<size_t>(sent) : 0;
      }
    }
    if (error.ok()) {
      op.request = std::make_shared<Request>(driver_);
      request = op.request;
      const bool behind = !send_queue_.empty();
      send_queue_.push_back(std::move(op));
      // Sends queued behind others: push what the kernel takes now, so a poster that never
      // waits still keeps the link busy.
      if (behind) {
        error = PushSendsLocked(&moved, &completed);
      } else {
        UpdateSendStateLocked();
      }
    }
  }
  if (!error.ok()) {
    FailFromDriving(error);
    return request != nullptr ? request : FailedRequest(error);
  }
  if (completed) driver_->WakeSleepers();
  return request;
}

// ---- receive side ----

void TcpChannel::CompleteRecvLocked(RecvOp& op, Status status) {
  op.request->Complete(std::move(status));
  recv_work_.fetch_sub(1, std::memory_order_relaxed);
}

Status TcpChannel::ProgressRecvLocked(bool* moved, bool* completed) {
  if (!recv_failure_.ok()) return Status::Ok();
  char* const staging = staging_.get();
  bool drained = false;  // the last read came back short: the socket has nothing more now
  for (;;) {
    // 1. Hand out what is staged.
    for (;;) {
      const size_t staged = staged_end_ - staged_begin_;
      if (discard_left_ > 0) {
        if (staged == 0) break;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(staged, discard_left_));
        staged_begin_ += n;
        discard_left_ -= n;
        continue;
      }
      if (active_.request) {
        if (staged == 0) break;
        const size_t n = std::min(staged, active_.bytes - active_got_);
        std::memcpy(active_.data + active_got_, staging + staged_begin_, n);
        staged_begin_ += n;
        active_got_ += n;
        if (active_got_ == active_.bytes) {
          CompleteRecvLocked(active_, Status::Ok());
          active_ = RecvOp{};
          *completed = true;
        }
        continue;
      }
      if (recv_queue_.empty() || staged < sizeof(MessageHeader)) break;
      MessageHeader header;
      std::memcpy(&header, staging + staged_begin_, sizeof(header));
      if (header.magic != kMessageMagic) {
        if (header.magic == kGoodbyeMagic) return TakeGoodbyeLocked(header);
        return Status::RemoteError(
            LostMessage("received a message header with a bad magic (stream out of step)"));
      }
      staged_begin_ += sizeof(header);
      RecvOp op = std::move(recv_queue_.front());
      recv_queue_.pop_front();
      *completed = true;
      if (op.tag != header.tag || op.bytes != header.bytes) {
        Status status = Status::Internal(
            "rank " + std::to_string(rank_) + ": receive from rank " + std::to_string(peer_) +
            " expected tag " + std::to_string(op.tag) + " and " + std::to_string(op.bytes) +
            " bytes, but the next message has tag " + std::to_string(header.tag) + " and " +
            std::to_string(header.bytes) + " bytes");
        BRAID_LOG(kWarn, rank_) << status.message();
        CompleteRecvLocked(op, std::move(status));
        // Drop that message's payload so the stream stays framed for the receives that follow.
        discard_left_ = header.bytes;
        continue;
      }
      if (op.bytes == 0) {
        CompleteRecvLocked(op, Status::Ok());
        continue;
      }
      active_ = std::move(op);
      active_got_ = 0;
    }
    if (staged_begin_ == staged_end_) staged_begin_ = staged_end_ = 0;
    if ((!active_.request && recv_queue_.empty()) || drained) return Status::Ok();

    // 2. Read more. What is staged now is less than a header: move it to the front.
    const size_t staged = staged_end_ - staged_begin_;
    if (staged_begin_ > 0) {
      std::memmove(staging, staging + staged_begin_, staged);
      staged_begin_ = 0;
      staged_end_ = staged;
    }
    iovec iov[2];
    int count = 0;
    size_t direct = 0;
    const RecvOp* next = nullptr;  // the receive the bytes after the direct ones are for
    if (active_.request) {
      direct = active_.bytes - active_got_;
      iov[count].iov_base = active_.data + active_got_;
      iov[count++].iov_len = direct;
      if (!recv_queue_.empty()) next = &recv_queue_.front();
    } else if (discard_left_ == 0) {
      next = &recv_queue_.front();
    }
    size_t tail = kStagingBytes - staged_end_;
    if (discard_left_ == 0 && (next == nullptr || next->bytes >= kDirectRecvBytes)) {
      // Only the next header: a large payload goes straight into its buffer.
      tail = std::min(tail, sizeof(MessageHeader) - std::min(staged, sizeof(MessageHeader)));
    }
    if (tail > 0) {
      iov[count].iov_base = staging + staged_end_;
      iov[count++].iov_len = tail;
    }
    const ssize_t got = ::readv(fd_, iov, count);
    if (got == 0) {
      return Status::RemoteError(LostMessage(
          "the peer closed the connection (end of file) (while receiving a message)"));
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (WouldBlock(errno)) return Status::Ok();
      return SocketError(errno, "receiving a message");
    }
    *moved = true;
    size_t left = static_cast<size_t>(got);
    if (direct > 0) {
      const size_t take = std::min(left, direct);
      active_got_ += take;
      left -= take;
      if (active_got_ == active_.bytes) {
        CompleteRecvLocked(active_, Status::Ok());
        active_ = RecvOp{};
        *completed = true;
      }
    }
    staged_end_ += left;
    if (static_cast<size_t>(got) < direct + tail) drained = true;
  }
}

RequestPtr TcpChannel::PostRecv(void* data, size_t bytes, uint64_t tag) {
  bool moved = false;
  bool completed = false;
  Status error;
  RequestPtr request;
  {
    std::lock_guard<std::mutex> lock(recv_mutex_);
    if (!recv_failure_.ok()) return FailedRequest(recv_failure_);
    const size_t staged = staged_end_ - staged_begin_;
    if (recv_queue_.empty() && !active_.request && discard_left_ == 0 &&
        staged >= sizeof(MessageHeader)) {
      // Fast path: the whole message is already staged.
      MessageHeader header;
      std::memcpy(&header, staging_.get() + staged_begin_, sizeof(header));
      if (header.magic == kMessageMagic && header.tag == tag && header.bytes == bytes &&
          staged - sizeof(header) >= bytes) {
        if (bytes > 0) std::memcpy(data, staging_.get() + staged_begin_ + sizeof(header), bytes);
        staged_begin_ += sizeof(header) + bytes;
        if (staged_begin_ == staged_end_) staged_begin_ = staged_end_ = 0;
        return DoneRequest();
      }
    }
    request = std::make_shared<Request>(driver_);
    recv_queue_.push_back(RecvOp{request, static_cast<char*>(data), bytes, tag});
    recv_work_.fetch_add(1, std::memory_order_relaxed);
    error = ProgressRecvLocked(&moved, &completed);
  }
  if (!error.ok()) {
    FailFromDriving(error);
  } else if (completed) {
    driver_->WakeSleepers();
  }
  return request;
}

Result<std::optional<Connection::Incoming>> TcpChannel::Probe() {
  driver_->Progress();  // as Test() would: every channel of the transport with work
  Status error;
  {
    std::lock_guard<std::mutex> lock(recv_mutex_);
    if (!recv_failure_.ok()) return recv_failure_;
    if (active_.request || !recv_queue_.empty()) {
      return Status::Internal(
          "rank " + std::to_string(rank_) + ": probe of the connection to rank " +
          std::to_string(peer_) + " while a receive is pending on it (the next message is that "
          "receive's)");
    }
    char* const staging = staging_.get();
    for (;;) {
      // What is staged first: the rest of a refused message, then (perhaps) the next header.
      size_t staged = staged_end_ - staged_begin_;
      if (discard_left_ > 0 && staged > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(staged, discard_left_));
        staged_begin_ += n;
        discard_left_ -= n;
        staged -= n;
      }
      if (staged_begin_ == staged_end_) staged_begin_ = staged_end_ = 0;
      if (discard_left_ == 0 && staged >= sizeof(MessageHeader)) {
        MessageHeader header;
        std::memcpy(&header, staging + staged_begin_, sizeof(header));
        if (header.magic != kMessageMagic) {
          error = header.magic == kGoodbyeMagic
                      ? TakeGoodbyeLocked(header)
                      : Status::RemoteError(LostMessage(
                            "received a message header with a bad magic (stream out of step)"));
          break;
        }
        Connection::Incoming incoming;
        incoming.tag = header.tag;
        incoming.bytes = static_cast<size_t>(header.bytes);
        return std::optional<Connection::Incoming>(incoming);
      }
      // Read more: the rest of a refused message (dropped through the staging buffer), else
      // only what completes the header, so no payload byte is taken from its receive.
      if (staged_begin_ > 0) {
        std::memmove(staging, staging + staged_begin_, staged);
        staged_begin_ = 0;
        staged_end_ = staged;
      }
      const size_t want =
          discard_left_ > 0
              ? static_cast<size_t>(std::min<uint64_t>(discard_left_, kStagingBytes - staged_end_))
              : sizeof(MessageHeader) - staged;
      const ssize_t got = ::recv(fd_, staging + staged_end_, want, MSG_DONTWAIT);
      if (got == 0) {
        error = Status::RemoteError(LostMessage(
            "the peer closed the connection (end of file) (while waiting for a message)"));
        break;
      }
      if (got < 0) {
        if (errno == EINTR) continue;
        if (WouldBlock(errno)) return std::optional<Connection::Incoming>();
        error = SocketError(errno, "waiting for a message");
        break;
      }
      staged_end_ += static_cast<size_t>(got);
      if (static_cast<size_t>(got) < want && discard_left_ == 0) {
        // A partial header: the rest is not here yet (the loop would only find EAGAIN).
        if (staged_end_ - staged_begin_ < sizeof(MessageHeader)) {
          return std::optional<Connection::Incoming>();
        }
      }
    }
  }
  FailFromDriving(error);
  return error;
}

// ---- driving ----

bool TcpChannel::Drive() {
  bool moved = false;
  bool completed = false;
  Status error;
  if (has_recv_work() && recv_mutex_.try_lock()) {
    error = ProgressRecvLocked(&moved, &completed);
    recv_mutex_.unlock();
  }
  if (error.ok() && has_send_work() && send_mutex_.try_lock()) {
    error = PushSendsLocked(&moved, &completed);
    send_mutex_.unlock();
  }
  if (!error.ok()) {
    FailFromDriving(error);
    return true;
  }
  if (completed) driver_->WakeSleepers();
  return moved || completed;
}

void TcpChannel::OnIdleHangup() {
  if (hangup_seen_.exchange(true)) return;
  Status lost;
  {
    std::lock_guard<std::mutex> lock(recv_mutex_);
    if (!recv_failure_.ok()) return;
    // Anything the peer sent before it left is still for the receives to come.
    char byte;
    const ssize_t peeked = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    MessageHeader next;
    if (peeked == 0 && staged_end_ == staged_begin_ && discard_left_ == 0) {
      lost = Status::RemoteError(LostMessage("the peer closed the connection (end of file)"));
    } else if (peeked > 0 && staged_end_ == staged_begin_ && discard_left_ == 0 &&
               ::recv(fd_, &next, sizeof(next), MSG_PEEK | MSG_DONTWAIT) ==
                   static_cast<ssize_t>(sizeof(next)) &&
               next.magic == kGoodbyeMagic) {
      // All that is left is the peer's goodbye: the link is gone, for what reason it said.
      lost = TakeGoodbyeLocked(next);
    } else if (peeked < 0 && !WouldBlock(errno) && errno != EINTR) {
      lost = SocketError(errno, "idle");
    }
  }
  if (!lost.ok()) return FailFromDriving(lost);
  // Data is left to read: receives go on; sends cannot reach the peer any more.
  const Status status =
      Status::RemoteError(LostMessage("the peer hung up (it closed the connection)"));
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    if (!send_failure_.ok()) return;
    send_failure_ = status;
    for (SendOp& op : send_queue_) op.request->Complete(status);
    send_queue_.clear();
    UpdateSendStateLocked();
  }
  BRAID_LOG(kInfo, rank_) << status.message();
  driver_->WakeSleepers();
}

// ---- failure ----

void TcpChannel::Fail(const Status& reason, bool goodbye) {
  {
    std::lock_guard<std::mutex> send_lock(send_mutex_);
    std::lock_guard<std::mutex> recv_lock(recv_mutex_);
    if (failed_.load()) return;
    const Status status = reason.ok() ? Status::Aborted(LostMessage("closed")) : reason;
    // The goodbye only fits between two messages: a half-sent one would swallow it as payload.
    // One non-blocking send, best effort: a full socket (a peer that stopped reading) gets none,
    // and a goodbye the kernel took only in part is cut short by the shutdown below, which the
    // peer reads as a plain end of file.
    if (goodbye && !reason.ok() && send_failure_.ok() &&
        (send_queue_.empty() || send_queue_.front().offset == 0)) {
      const std::string& text = reason.message();
      MessageHeader header;
      header.magic = kGoodbyeMagic;
      header.bytes = std::min(text.size(), kMaxGoodbyeBytes);
      std::string frame(reinterpret_cast<const char*>(&header), sizeof(header));
      frame.append(text, 0, header.bytes);
      (void)::send(fd_, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    for (SendOp& op : send_queue_) op.request->Complete(status);
    send_queue_.clear();
    UpdateSendStateLocked();
    if (send_failure_.ok()) send_failure_ = status;
    if (active_.request) CompleteRecvLocked(active_, status);
    active_ = RecvOp{};
    for (RecvOp& op : recv_queue_) CompleteRecvLocked(op, status);
    recv_queue_.clear();
    recv_work_.store(0, std::memory_order_relaxed);
    recv_failure_ = status;
    failed_.store(true);
    ::shutdown(fd_, SHUT_RDWR);  // the peer sees end of file; our pollers wake
  }
  driver_->WakeSleepers();
}

// ---- TcpConnection ----

TcpConnection::TcpConnection(std::shared_ptr<TcpChannel> channel) : channel_(std::move(channel)) {}

TcpConnection::~TcpConnection() {
  Close(Status::Aborted("rank " + std::to_string(channel_->rank()) + ": connection to rank " +
                        std::to_string(channel_->peer()) + " was destroyed"));
}

RequestPtr TcpConnection::PostSend(const void* data, size_t bytes, uint64_t tag) {
  return channel_->PostSend(data, bytes, tag);
}

RequestPtr TcpConnection::PostRecv(void* data, size_t bytes, uint64_t tag) {
  return channel_->PostRecv(data, bytes, tag);
}

Result<std::optional<Connection::Incoming>> TcpConnection::Probe() { return channel_->Probe(); }

void TcpConnection::Close(const Status& reason) {
  channel_->Fail(reason.ok() ? Status::Aborted("rank " + std::to_string(channel_->rank()) +
                                               ": connection to rank " +
                                               std::to_string(channel_->peer()) + " closed")
                             : reason);
  channel_->driver()->Remove(channel_.get());
}

}  // namespace braid::transport::tcp
