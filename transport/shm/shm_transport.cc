// The shm transport: listener, handshake and control thread (see shm_transport.h for the why).
#include "transport/shm/shm_transport.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/logging.h"
#include "transport/handshake.h"
#include "transport/link_stash.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/ring_size.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_connection.h"
#include "transport/shm/stalled_sends.h"
#include "transport/shm/unix_socket.h"
#include "transport/shm/wait.h"
#include "transport/shm/wire.h"

namespace braid::transport::shm {
namespace {

constexpr char kAddressPrefix[] = "braid-shm-";
constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;
// Backoff between dials while nobody listens at the peer's address yet.
constexpr int kFirstRetryMs = 1;
constexpr int kMaxRetryMs = 50;
// A published address exists from the peer's transport's creation to its end, so an address
// nobody has listened on for this long means the peer is gone (exited or killed), not late:
// Connect fails naming it instead of waiting for the deadline.
constexpr int64_t kGoneAfterRefusedMs = 1000;


// Whether `address` has the shape of a shm address (what LocalAddress() publishes).
bool ValidAddress(const std::string& address) {
  return address.compare(0, sizeof(kAddressPrefix) - 1, kAddressPrefix) == 0 &&
         address.size() <= 100;
}

// The process id in a shm address ("...-r<rank>-<pid>-<nonce>", see Create), or -1. It only
// sizes the rings a dialer offers (ring_size.h: threads of one process keep the small ring); the
// handshake's process token is what decides how the link copies.
pid_t PidInAddress(const std::string& address) {
  const size_t last = address.rfind('-');
  if (last == std::string::npos || last == 0) return -1;
  const size_t before = address.rfind('-', last - 1);
  if (before == std::string::npos || before + 1 >= last) return -1;
  pid_t pid = 0;
  for (size_t i = before + 1; i < last; ++i) {
    const char c = address[i];
    if (c < '0' || c > '9' || pid > 100'000'000) return -1;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

// Whether nobody listens at the peer's `address` any more; "" when somebody does (or it cannot
// be told, or the address is unusable), else what says it is gone. A peer that just died may
// still be closing its sockets, so a live answer is asked again `tries` times, 100 ms apart.
std::string GoneListener(const std::string& address, int tries) {
  if (!ValidAddress(address)) return "";
  for (int i = 0; i < tries; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::string detail;
    if (ProbeAbstract(address, &detail) == Listening::kNobody) {
      return "nobody listens at @" + address + " any more (" + detail +
             "; its process exited or was killed, or its communicator was aborted)";
    }
  }
  return "";
}

// What is wrong with the size of a received frame of `n` bytes, or "" (handshake::CheckSize
// names a frame of another size by its version). `truncated`: it, or its descriptors, did not fit.
std::string CheckSize(const HandshakeFrame& frame, ssize_t n, bool truncated) {
  std::string why =
      handshake::CheckSize(kProtocol, frame.envelope, static_cast<size_t>(n), sizeof(frame));
  if (why.empty() && truncated) {
    why = "a frame longer than a handshake frame (" + std::to_string(sizeof(frame)) +
          " bytes), or with more than one descriptor";
  }
  return why;
}

bool ValidRingBytes(uint64_t bytes) {
  return bytes >= (uint64_t{64} << 10) && bytes <= kMaxRingBytes && (bytes & (bytes - 1)) == 0;
}

// Falling back to two copies is worth one warning per process, not one per link -- and none
// when this rank would not copy across processes anyway (`matters` false).
void NoteNoCrossMemory(int rank, int peer, const std::string& why, bool matters) {
  static std::atomic<bool> warned{false};
  if (matters && !warned.exchange(true)) {
    BRAID_LOG(kWarn, rank) << "shm: cannot read the memory of rank " << peer << " (" << why
                           << "); large messages between ranks that cannot read each other go "
                              "through the shared ring (two copies). Logged once per process.";
  } else {
    BRAID_LOG(kInfo, rank) << "shm: cannot read the memory of rank " << peer << " (" << why << ")";
  }
}

// `options` with what the communicator's config decided: Config::shm_single_copy_bytes, once
// the communicator has resolved it (algorithms/single_copy_choice.h: set, or measured on this
// host), replaces cross_process_copy_bytes; unset (-1), as in tests that build a context by
// hand, leaves the options as given.
ShmOptions WithConfig(ShmOptions options, const Config& config) {
  if (config.shm_single_copy_bytes == 0) options.cross_process_copy_bytes = kNeverCopyOnce;
  if (config.shm_single_copy_bytes > 0) {
    options.cross_process_copy_bytes = static_cast<uint64_t>(config.shm_single_copy_bytes);
  }
  return options;
}

// A handshaken link waiting for (or handed to) Connect.
struct Link {
  int socket = -1;
  Segment segment;
  pid_t peer_pid = -1;
  bool same_process = false;
  bool we_read_peer = false;
  bool peer_reads_us = false;
};

// An accepted socket whose handshake is in progress (control thread only).
struct PendingHandshake {
  explicit PendingHandshake(handshake::Party self) : listener(std::move(self)) {}
  int fd = -1;
  int64_t deadline_ns = 0;
  bool hello_done = false;  // challenge sent, waiting for the proof
  handshake::Listener listener;
  Link link;
};

}  // namespace

struct ShmTransport::State {
  State(const TransportContext& c, const ShmOptions& o, uint64_t same_process_ring)
      : context(c), options(o), rank(c.rank), same_process_ring_bytes(same_process_ring) {}

  const TransportContext context;
  const ShmOptions options;  // ring_bytes resolved: the rings this rank dials with to processes
  const int rank;
  const uint64_t same_process_ring_bytes;  // ... and to threads of its own process
  std::string address;  // abstract socket name
  // The control thread's after Create; it closes it once the transport is aborted (-1 from then
  // on: StopListening).
  int listen_fd = -1;
  int wake_fd = -1;   // eventfd: the control thread re-reads its watch list
  int abort_fd = -1;  // eventfd written once by Abort and never drained: readable = aborted
  std::shared_ptr<StalledSends> stalled;  // shared with every channel
  std::thread control;

  // Guards the fields below. A leaf lock: never held while calling into a channel or blocking
  // on anything but stash_cv.
  std::mutex mutex;
  std::condition_variable stash_cv;
  Status aborted;
  bool stopping = false;
  std::map<int, Link> stash;  // handshaken links by lower peer rank, until Connect claims them
  std::set<int> claimed;
  std::vector<std::shared_ptr<ShmChannel>> watched;  // sockets the control thread polls
  std::vector<std::weak_ptr<ShmChannel>> channels;   // every link made, for Abort

  // Control thread only.
  std::vector<PendingHandshake> handshakes;

  bool CopyOnceMatters() const { return options.cross_process_copy_bytes != kNeverCopyOnce; }

  // This rank's side of every handshake.
  handshake::Party Party() const {
    return {kProtocol, context.comm_id, rank, context.size, context.secret};
  }

  std::string Where(const std::string& what) const {
    return "rank " + std::to_string(rank) + ": shm transport: " + what;
  }

  void Kick() {
    uint64_t one = 1;
    (void)::write(wake_fd, &one, sizeof(one));
  }

  // ---- control thread ----

  // Why an aborted transport stops listening: a peer waiting for this rank to dial it (the lower
  // rank dials) only probes that this listener is there, and an aborted transport never dials;
  // with the socket closed its name is free, the probe finds nobody, and that peer reports "rank
  // R is gone" within a second and reads why from the root-cause record, instead of waiting for
  // its timeout. Dialers get a refused connection instead of a refused handshake; both fail their
  // Connect. Closed on the thread that polls it, so no poll ever sees a reused descriptor.
  void StopListening() {
    ::close(listen_fd);
    listen_fd = -1;  // poll() skips a negative descriptor
  }

  void ControlLoop() {
    std::vector<pollfd> fds;
    std::vector<std::shared_ptr<ShmChannel>> links;
    for (;;) {
      bool stop_listening = false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopping) break;
        stop_listening = !aborted.ok() && listen_fd >= 0;
        watched.erase(
            std::remove_if(watched.begin(), watched.end(),
                           [](const std::shared_ptr<ShmChannel>& c) { return c->finished(); }),
            watched.end());
        links = watched;
      }
      if (stop_listening) StopListening();
      fds.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      int64_t now = NowNs();
      int64_t next_deadline = INT64_MAX;
      for (const PendingHandshake& hs : handshakes) {
        fds.push_back({hs.fd, POLLIN, 0});
        next_deadline = std::min(next_deadline, hs.deadline_ns);
      }
      for (const auto& link : links) fds.push_back({link->socket(), POLLIN | POLLRDHUP, 0});
      int timeout_ms = -1;
      if (next_deadline != INT64_MAX) {
        timeout_ms = static_cast<int>(std::max<int64_t>(0, (next_deadline - now) / 1000000 + 1));
      }
      // Sends waiting for ring space: look every millisecond whether anybody pushes them.
      const bool check_stalled = stalled->StartCheck();
      if (check_stalled) timeout_ms = timeout_ms < 0 ? 1 : std::min(timeout_ms, 1);
      int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0 && errno != EINTR) {
        BRAID_LOG(kWarn, rank) << Where(std::string("poll failed: ") + std::strerror(errno));
      }
      if (fds[0].revents != 0) {
        uint64_t count;
        (void)::read(wake_fd, &count, sizeof(count));
      }
      if (fds[1].revents != 0) AcceptAll();
      // Handshakes (those just accepted are polled next round).
      now = NowNs();
      size_t index = 2;
      std::vector<PendingHandshake> still;
      const size_t polled = fds.size() - 2 - links.size();
      for (size_t i = 0; i < handshakes.size(); ++i) {
        PendingHandshake& hs = handshakes[i];
        bool finished = false;
        if (i < polled && fds[index + i].revents != 0) finished = OnHandshakeReadable(hs);
        if (!finished && now >= hs.deadline_ns) {
          Refuse(hs, "no handshake within " + std::to_string(options.handshake_timeout_ms) + " ms",
                 nullptr);
          finished = true;
        }
        if (!finished) still.push_back(std::move(hs));
      }
      handshakes = std::move(still);
      index += polled;
      for (size_t i = 0; i < links.size(); ++i) {
        if (fds[index + i].revents != 0) OnLinkReadable(links[i], fds[index + i].revents);
      }
      if (check_stalled) (void)stalled->Check();
      links.clear();  // a link dropped by its connection is destroyed here, off the fast path
    }
    for (PendingHandshake& hs : handshakes) ::close(hs.fd);
    handshakes.clear();
  }

  void AcceptAll() {
    for (;;) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          BRAID_LOG(kWarn, rank) << Where(std::string("accept failed: ") + std::strerror(errno));
        }
        return;
      }
      PendingHandshake hs(Party());
      hs.fd = fd;
      hs.deadline_ns = NowNs() + options.handshake_timeout_ms * 1000000;
      handshakes.push_back(std::move(hs));
    }
  }

  // Refuses the connection, first telling the sender of `frame` why when there is a frame and
  // it speaks this handshake (a stranger just sees the close).
  void Refuse(PendingHandshake& hs, const std::string& why, const HandshakeFrame* frame) {
    BRAID_LOG(kWarn, rank) << Where("refused a connection on @" + address + ": " + why);
    if (frame != nullptr && handshake::SpeaksProtocol(kProtocol, frame->envelope)) {
      HandshakeFrame refusal;
      hs.listener.WriteRefusal(why, frame->envelope, &refusal.envelope);
      (void)SendFrame(hs.fd, &refusal, sizeof(refusal));
    }
    ::close(hs.fd);
    hs.fd = -1;
  }

  // Drops, without a warning, a connection that closed before sending anything: that is a peer's
  // liveness probe (ProbeAbstract), not a handshake that failed.
  void DropProbe(PendingHandshake& hs) {
    BRAID_LOG(kTrace, rank) << Where("a connection on @" + address +
                                     " closed before sending anything (a liveness probe?)");
    ::close(hs.fd);
    hs.fd = -1;
  }

  // True once `hs` is settled (refused, or stashed for Connect).
  bool OnHandshakeReadable(PendingHandshake& hs) {
    HandshakeFrame frame;
    int passed = -1;
    bool truncated = false;
    ssize_t n = RecvFrame(hs.fd, &frame, sizeof(frame), &passed, &truncated);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0) {
      if (passed >= 0) ::close(passed);
      if (!hs.hello_done && (n == 0 || errno == ECONNRESET)) {
        DropProbe(hs);
      } else {
        Refuse(hs, n == 0 ? "closed before completing the handshake" : std::strerror(errno),
               nullptr);
      }
      return true;
    }
    // Only a frame whose magic arrived is answered with a refusal.
    const HandshakeFrame* answerable =
        static_cast<size_t>(n) >= sizeof(uint32_t) ? &frame : nullptr;
    std::string why = CheckSize(frame, n, truncated);
    if (!hs.hello_done) {
      if (why.empty()) why = hs.listener.OnHello(frame.envelope);
      if (why.empty() && passed < 0) why = "no segment descriptor attached to the hello";
      if (why.empty() && !ValidRingBytes(frame.ring_bytes)) {
        why = "ring size " + std::to_string(frame.ring_bytes) +
              " is not a power of two in "
              "[64 KiB, 1 GiB]";
      }
      if (why.empty()) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!aborted.ok()) why = "this transport was aborted";
        if (claimed.count(hs.listener.peer()) != 0) {
          why = "rank " + std::to_string(hs.listener.peer()) + " is already connected";
        }
      }
      if (!why.empty()) {
        if (passed >= 0) ::close(passed);
        Refuse(hs, why, answerable);
        return true;
      }
      const int sender = hs.listener.peer();
      Result<Segment> segment = Segment::Attach(passed, frame.segment_bytes, context.comm_id,
                                                sender, rank, frame.ring_bytes);
      ::close(passed);  // the mapping keeps the memory
      if (!segment.ok()) {
        Refuse(hs, segment.status().message(), &frame);
        return true;
      }
      HandshakeFrame answer;
      Status challenged = hs.listener.WriteChallenge(&answer.envelope);
      if (!challenged.ok()) {
        Refuse(hs, challenged.message(), &frame);
        return true;
      }
      hs.link.segment = std::move(segment).value();
      hs.link.peer_pid = PeerPid(hs.fd);
      hs.link.same_process =
          frame.process_token == ProcessToken() && hs.link.peer_pid == ::getpid();
      hs.link.we_read_peer = false;
      if (options.cross_memory) {
        std::string probe_error;
        hs.link.we_read_peer =
            hs.link.same_process ||
            ProbeRead(hs.link.peer_pid, frame.probe_address, frame.process_token, &probe_error);
        if (!hs.link.we_read_peer) {
          NoteNoCrossMemory(rank, sender, probe_error, CopyOnceMatters());
        }
      }
      answer.process_token = ProcessToken();
      answer.probe_address = ProbeAddress();
      answer.flags = hs.link.we_read_peer ? kCanReadYou : 0;
      if (!SendFrame(hs.fd, &answer, sizeof(answer))) {
        Refuse(hs, std::string("could not answer the hello: ") + std::strerror(errno), nullptr);
        return true;
      }
      hs.hello_done = true;
      return false;
    }
    // A wrong proof of a well-formed frame is answered too (Refuse), so that the dialer's
    // Connect can say "different secrets".
    if (why.empty()) why = hs.listener.OnProof(frame.envelope, nullptr);
    if (passed >= 0) {
      ::close(passed);
      if (why.empty()) why = "unexpected descriptor attached to the proof";
    }
    if (why.empty()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!aborted.ok()) why = "this transport was aborted";
    }
    if (!why.empty()) {
      Refuse(hs, why, answerable);
      return true;
    }
    const int sender = hs.listener.peer();
    HandshakeFrame accept;
    hs.listener.WriteAccept(&accept.envelope);
    if (!SendFrame(hs.fd, &accept, sizeof(accept))) {
      Refuse(hs, std::string("could not accept the peer: ") + std::strerror(errno), nullptr);
      return true;
    }
    hs.link.peer_reads_us = options.cross_memory && (frame.flags & kCanReadYou) != 0;
    hs.link.socket = hs.fd;
    hs.fd = -1;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = stash.find(sender);
      if (it != stash.end()) {
        // The peer dialed again (its earlier Connect gave up): the newer link is the live one.
        BRAID_LOG(kWarn, rank) << Where("rank " + std::to_string(sender) +
                                        " connected again before the first link was used; "
                                        "keeping the newer one");
        ::close(it->second.socket);
        stash.erase(it);
      }
      stash.emplace(sender, std::move(hs.link));
    }
    stash_cv.notify_all();
    return true;
  }

  void OnLinkReadable(const std::shared_ptr<ShmChannel>& link, short revents) {
    bool gone = (revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0;
    bool doorbell = false;
    std::string why =
        "the peer closed its end of the shm link (it closed the connection, exited "
        "or was killed)";
    for (;;) {
      // One packet per recv (SOCK_SEQPACKET): a doorbell byte, or a goodbye and its text.
      char bytes[1 + kMaxGoodbyeBytes];
      ssize_t n = ::recv(link->socket(), bytes, sizeof(bytes), MSG_DONTWAIT);
      if (n > 0 && bytes[0] == kGoodbye) {
        link->goodbye().assign(bytes + 1, static_cast<size_t>(n - 1));
        continue;
      }
      if (n > 0) {
        doorbell = true;
        continue;
      }
      if (n == 0) {
        gone = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        gone = true;
        why = std::string("its socket failed: ") + std::strerror(errno);
      }
      break;
    }
    if (doorbell) link->OnDoorbell();
    if (gone && !link->goodbye().empty()) {
      why = "rank " + std::to_string(link->peer()) + " closed the link and said why: " +
            link->goodbye();
    }
    if (gone && !link->finished()) {
      Status status = Status::RemoteError("rank " + std::to_string(rank) + ": connection to rank " +
                                          std::to_string(link->peer()) + " lost: " + why);
      BRAID_LOG(kInfo, rank) << status.message();
      link->OnPeerGone(status);
    }
  }

  // ---- Connect's thread ----

  Result<std::unique_ptr<Connection>> MakeConnection(int peer, int side, Link link) {
    ChannelSetup setup;
    setup.rank = rank;
    setup.peer = peer;
    setup.side = side;
    setup.socket = link.socket;
    setup.segment = std::move(link.segment);
    setup.remote_min_bytes =
        link.same_process ? options.same_process_copy_bytes : options.cross_process_copy_bytes;
    setup.stalled = stalled;
    setup.budget = options.wait_budget
                       ? *options.wait_budget
                       : WaitBudget::For(context.size, context.config.wait_policy);
    setup.peer_reads_us = link.peer_reads_us;
    setup.we_read_peer = link.we_read_peer;
    setup.same_process = link.same_process;
    setup.peer_pid = link.peer_pid;
    std::shared_ptr<ShmChannel> channel = ShmChannel::Create(std::move(setup));
    Status abort_status;
    {
      std::lock_guard<std::mutex> lock(mutex);
      abort_status = aborted;
      if (abort_status.ok()) {
        watched.push_back(channel);
        channels.erase(
            std::remove_if(channels.begin(), channels.end(),
                           [](const std::weak_ptr<ShmChannel>& c) { return c.expired(); }),
            channels.end());
        channels.push_back(channel);
      }
    }
    if (!abort_status.ok()) {
      channel->Fail(abort_status);
      return abort_status;
    }
    Kick();
    BRAID_LOG(kInfo, rank) << "shm connection to rank " << peer
                           << " is up (large messages: " << channel->large_message_path() << ")";
    return std::unique_ptr<Connection>(new ShmConnection(std::move(channel)));
  }

  // Sleeps up to `ms` unless the transport is aborted first; false if aborted.
  bool SleepUnlessAborted(int ms) {
    pollfd pfd{abort_fd, POLLIN, 0};
    return ::poll(&pfd, 1, ms) <= 0;
  }

  // The accepting side: waits for the peer's handshaken link, probing the peer's socket every
  // kProbeEveryMs meanwhile so that a peer that died before (or while) dialing is named within a
  // second instead of at the deadline. No probes when `peer_address` is not a shm address.
  Result<Link> AwaitDialer(int peer, const std::string& peer_address, Deadline deadline) {
    std::function<std::string()> probe;
    if (ValidAddress(peer_address)) probe = [&] { return GoneListener(peer_address, 1); };
    std::unique_lock<std::mutex> lock(mutex);
    return AwaitStashedLink(lock, stash_cv, stash, claimed, aborted, rank, peer, deadline,
                            "shm connection", "listening on @" + address, probe);
  }

  // Waits for the acceptor's next frame on `fd`. `*hung_up` says the socket closed (a refusal
  // without answer, or the acceptor died) so that the caller can tell which.
  Result<HandshakeFrame> AwaitFrame(int fd, const std::string& who, Deadline deadline,
                                    int64_t budget_ms, bool* hung_up) {
    HandshakeFrame frame;
    auto refused = [&](const std::string& why) {
      return Status::RemoteError(who + " refused the shm handshake: " + why +
                                 " (wrong address, communicator or build? see its log)");
    };
    for (;;) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {abort_fd, POLLIN, 0}};
      int64_t left = deadline.RemainingMs();
      int ready = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
      if (fds[1].revents != 0) {
        std::lock_guard<std::mutex> lock(mutex);
        return aborted;
      }
      if (ready == 0 || (ready < 0 && deadline.Expired())) {
        return Status::Timeout(who + " did not answer the shm handshake within " +
                               std::to_string(budget_ms) + " ms");
      }
      if (ready < 0) continue;
      int passed = -1;
      bool truncated = false;
      ssize_t n = RecvFrame(fd, &frame, sizeof(frame), &passed, &truncated);
      if (passed >= 0) ::close(passed);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        *hung_up = true;
        return refused(n == 0 ? "it closed the connection" : std::strerror(errno));
      }
      std::string why = CheckSize(frame, n, truncated);
      if (!why.empty()) return refused(why);
      return frame;
    }
  }

  Result<std::unique_ptr<Connection>> Dial(int peer, const std::string& peer_address,
                                           Deadline deadline) {
    const int64_t budget_ms = deadline.RemainingMs();
    const std::string who = "rank " + std::to_string(rank) + ": rank " + std::to_string(peer) +
                            " at @" + peer_address;
    auto aborted_status = [&] {
      std::lock_guard<std::mutex> lock(mutex);
      return aborted;
    };
    // Connect, retrying while nobody listens there yet -- but not for long: the address was
    // published by a listening transport, so one that stays refused is a peer that is gone.
    int fd = -1;
    std::string last_error = "none";
    bool refused = false;
    auto refused_since = std::chrono::steady_clock::now();
    for (int retry_ms = kFirstRetryMs;;) {
      if (Status s = aborted_status(); !s.ok()) return s;
      fd = ConnectAbstract(peer_address);
      if (fd >= 0) break;
      const int error = errno;
      last_error = std::strerror(error);
      const auto now = std::chrono::steady_clock::now();
      if (error != ECONNREFUSED) {
        refused = false;
      } else if (!refused) {
        refused = true;
        refused_since = now;
      } else if (now - refused_since >= std::chrono::milliseconds(kGoneAfterRefusedMs)) {
        return PeerGone(rank, peer,
                        "nobody has listened at @" + peer_address + " for " +
                            std::to_string(kGoneAfterRefusedMs) +
                            " ms (its process exited or was killed, or its communicator was "
                            "aborted)");
      }
      if (deadline.Expired()) {
        return Status::Timeout("rank " + std::to_string(rank) + ": could not connect to rank " +
                               std::to_string(peer) + " at @" + peer_address + " within " +
                               std::to_string(budget_ms) + " ms (last error: " + last_error + ")");
      }
      if (!SleepUnlessAborted(
              static_cast<int>(std::min<int64_t>(retry_ms, deadline.RemainingMs())))) {
        continue;  // aborted: reported at the top of the loop
      }
      retry_ms = std::min(retry_ms * 2, kMaxRetryMs);
    }
    bool hung_up = false;
    // Every failure from here on closes the socket; one where the acceptor's socket closed on us
    // asks whether its listener is still there, to tell a refusal from a death.
    auto fail = [&](Status status) {
      ::close(fd);
      if (hung_up && status.code() == Code::kRemoteError) {
        std::string gone = GoneListener(peer_address, 3);
        if (!gone.empty()) return PeerGone(rank, peer, gone);
      }
      return status;
    };
    auto auth_failed = [&](const std::string& why) {
      BRAID_LOG(kWarn, rank) << "shm handshake with rank " << peer << " at @" << peer_address
                             << " failed: " << why;
      return fail(Status::RemoteError(who + ": shm handshake failed: " + why));
    };
    int memfd = -1;
    const uint64_t ring_bytes = PidInAddress(peer_address) == ::getpid()
                                    ? same_process_ring_bytes
                                    : options.ring_bytes;
    Result<Segment> segment = Segment::Create(context.comm_id, rank, peer, ring_bytes, &memfd);
    if (!segment.ok())
      return fail(
          segment.status().WithContext(Where("connecting to rank " + std::to_string(peer))));
    HandshakeFrame hello;
    handshake::Dialer dialer(Party(), peer);
    Status said = dialer.WriteHello(&hello.envelope);
    if (!said.ok()) {
      ::close(memfd);
      return fail(said);
    }
    hello.process_token = ProcessToken();
    hello.probe_address = ProbeAddress();
    hello.segment_bytes = Segment::BytesFor(ring_bytes);
    hello.ring_bytes = ring_bytes;
    bool sent = SendFrame(fd, &hello, sizeof(hello), memfd);
    int send_errno = errno;
    ::close(memfd);  // the peer holds its own reference once the hello is received
    if (!sent) {
      hung_up = send_errno == EPIPE || send_errno == ECONNRESET;
      return fail(
          Status::RemoteError(who + " dropped the shm handshake: " + std::strerror(send_errno)));
    }
    // Ends the handshake as it was judged, unless it goes on.
    auto judged = [&](const handshake::Dialer::Verdict& verdict) {
      if (verdict.outcome == handshake::Dialer::Outcome::kAuthFailed) {
        return auth_failed(verdict.why);
      }
      return fail(Status::RemoteError(who + " refused the shm handshake: " + verdict.why +
                                      " (wrong address, communicator or build? see its log)"));
    };
    // The challenge: the acceptor's nonce and its proof, judged only after ours was.
    Result<HandshakeFrame> challenge = AwaitFrame(fd, who, deadline, budget_ms, &hung_up);
    if (!challenge.ok()) return fail(challenge.status());
    HandshakeFrame proof;
    handshake::Dialer::Verdict verdict = dialer.OnChallenge(challenge.value().envelope,
                                                            &proof.envelope);
    if (verdict.outcome != handshake::Dialer::Outcome::kContinue) return judged(verdict);
    Link link;
    link.segment = std::move(segment).value();
    link.peer_pid = PeerPid(fd);
    link.same_process =
        challenge.value().process_token == ProcessToken() && link.peer_pid == ::getpid();
    if (options.cross_memory) {
      std::string probe_error;
      link.we_read_peer =
          link.same_process || ProbeRead(link.peer_pid, challenge.value().probe_address,
                                         challenge.value().process_token, &probe_error);
      if (!link.we_read_peer) NoteNoCrossMemory(rank, peer, probe_error, CopyOnceMatters());
      link.peer_reads_us = (challenge.value().flags & kCanReadYou) != 0;
    }
    proof.process_token = ProcessToken();
    proof.probe_address = ProbeAddress();
    proof.flags = link.we_read_peer ? kCanReadYou : 0;
    if (!SendFrame(fd, &proof, sizeof(proof))) {
      hung_up = errno == EPIPE || errno == ECONNRESET;
      return fail(
          Status::RemoteError(who + " dropped the shm handshake: " + std::strerror(errno)));
    }
    // The verdict on our proof; the link is up only once it is an accept.
    Result<HandshakeFrame> answer = AwaitFrame(fd, who, deadline, budget_ms, &hung_up);
    if (!answer.ok()) return fail(answer.status());
    verdict = dialer.OnAnswer(answer.value().envelope);
    if (verdict.outcome != handshake::Dialer::Outcome::kContinue) return judged(verdict);
    link.socket = fd;
    return MakeConnection(peer, /*side=*/0, std::move(link));
  }
};

Result<std::unique_ptr<ShmTransport>> ShmTransport::Create(const TransportContext& context,
                                                           const ShmOptions& options) {
  const int rank = context.rank;
  if (context.size < 1 || rank < 0 || rank >= context.size) {
    return Status::InvalidArgument("shm transport: rank " + std::to_string(rank) +
                                   " is outside a communicator of size " +
                                   std::to_string(context.size));
  }
  auto where = [rank](const std::string& what) {
    return "rank " + std::to_string(rank) + ": shm transport: " + what;
  };
  if (options.ring_bytes != kRingBytesByPlacement && !ValidRingBytes(options.ring_bytes)) {
    return Status::InvalidArgument(where("ring size " + std::to_string(options.ring_bytes) +
                                         " is not a power of two in [64 KiB, 1 GiB]"));
  }
  if (context.size == 1) return std::unique_ptr<ShmTransport>();  // nobody to reach
  ShmOptions resolved = WithConfig(options, context.config);
  uint64_t same_process_ring = options.ring_bytes;
  if (options.ring_bytes == kRingBytesByPlacement) {
    const RingSizeChoice choice = ChooseRingBytesHere(context.size);
    resolved.ring_bytes = choice.cross_process_bytes;
    same_process_ring = choice.same_process_bytes;
    BRAID_LOG(kInfo, rank) << where(choice.reason);
  }
  int probe = ::memfd_create("braid-shm-probe", MFD_CLOEXEC);
  if (probe < 0) {
    BRAID_LOG(kInfo, rank) << where(std::string("memfd_create unavailable (") +
                                    std::strerror(errno) + "); not using shared memory");
    return std::unique_ptr<ShmTransport>();
  }
  ::close(probe);

  auto state = std::make_shared<State>(context, resolved, same_process_ring);
  uint32_t nonce = 0;
  if (::getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
    nonce = static_cast<uint32_t>(NowNs());
  }
  std::ostringstream name;
  name << kAddressPrefix << std::hex << context.comm_id << std::dec << "-r" << rank << "-"
       << ::getpid() << "-" << std::hex << nonce;
  state->address = name.str();
  Result<int> listen_fd = ListenAbstract(state->address);
  if (!listen_fd.ok()) return listen_fd.status().WithContext(where("starting"));
  state->listen_fd = listen_fd.value();
  state->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  state->abort_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (state->wake_fd < 0 || state->abort_fd < 0) {
    Status status = Status::SystemError(where(std::string("eventfd: ") + std::strerror(errno)));
    ::close(state->listen_fd);
    if (state->wake_fd >= 0) ::close(state->wake_fd);
    if (state->abort_fd >= 0) ::close(state->abort_fd);
    return status;
  }
  state->stalled = std::make_shared<StalledSends>(state->wake_fd);
  state->control = std::thread([raw = state.get()] {
    pthread_setname_np(pthread_self(), "braid-shm-ctl");
    raw->ControlLoop();
  });
  BRAID_LOG(kInfo, rank) << "shm transport listening on @" << state->address;
  return std::unique_ptr<ShmTransport>(new ShmTransport(std::move(state)));
}

ShmTransport::ShmTransport(std::shared_ptr<State> state) : state_(std::move(state)) {}

ShmTransport::~ShmTransport() {
  Abort(Status::Aborted("rank " + std::to_string(state_->rank) + ": shm transport destroyed"));
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->Kick();
  if (state_->control.joinable()) state_->control.join();
  state_->stalled->Detach();
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (auto& entry : state_->stash) ::close(entry.second.socket);
    state_->stash.clear();
    state_->watched.clear();
  }
  if (state_->listen_fd >= 0) ::close(state_->listen_fd);
  ::close(state_->wake_fd);
  ::close(state_->abort_fd);
}

std::string ShmTransport::LocalAddress() const { return state_->address; }

bool ShmTransport::CanConnect(const PeerInfo& self, const PeerInfo& peer) const {
  // The abstract Unix sockets the link is made over are per network namespace.
  return !self.host.empty() && self.host == peer.host && !self.boot_id.empty() &&
         self.boot_id == peer.boot_id && self.net_ns == peer.net_ns;
}

Result<std::unique_ptr<Connection>> ShmTransport::Connect(int peer, const std::string& peer_address,
                                                          Deadline deadline) {
  State& s = *state_;
  const int rank = s.rank;
  if (peer < 0 || peer >= s.context.size || peer == rank) {
    return Status::InvalidArgument(
        "rank " + std::to_string(rank) + ": shm transport cannot connect to rank " +
        std::to_string(peer) + " in a communicator of size " + std::to_string(s.context.size));
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.aborted.ok()) return s.aborted;
  }
  if (peer < rank) {
    // The peer dials us: wait for the control thread to stash its handshaken link.
    auto link = s.AwaitDialer(peer, peer_address, deadline);
    if (!link.ok()) return link.status();
    return s.MakeConnection(peer, /*side=*/1, std::move(link).value());
  }
  if (!ValidAddress(peer_address)) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + ": bad shm address '" +
                                   peer_address + "' for rank " + std::to_string(peer) +
                                   " (expected " + kAddressPrefix + "...)");
  }
  return s.Dial(peer, peer_address, deadline);
}

void ShmTransport::Abort(const Status& reason) {
  State& s = *state_;
  Status status =
      Status::Aborted(reason.message().empty() ? "shm transport aborted" : reason.message());
  std::vector<std::shared_ptr<ShmChannel>> channels;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.aborted.ok()) return;
    s.aborted = status;
    for (const auto& weak : s.channels) {
      if (auto channel = weak.lock()) channels.push_back(std::move(channel));
    }
  }
  uint64_t one = 1;
  (void)::write(s.abort_fd, &one, sizeof(one));  // never drained: wakes dialing Connects for good
  s.stash_cv.notify_all();
  for (const auto& channel : channels) channel->Fail(status, /*goodbye=*/true);
  s.Kick();
  BRAID_LOG(kInfo, s.rank) << "shm transport aborted: " << status.message();
}

}  // namespace braid::transport::shm
