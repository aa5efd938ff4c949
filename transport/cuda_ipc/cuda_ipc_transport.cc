#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/base/logging.h"
#include "core/device/shareable_probe.h"
#include "transport/cuda_ipc/cuda_ipc_connection.h"
#include "transport/cuda_ipc/inbox.h"
#include "transport/cuda_ipc/wire.h"
#include "transport/handshake.h"
#include "transport/link_stash.h"
#include "transport/shm/unix_socket.h"

namespace braid::transport::cuda_ipc {
namespace {

constexpr char kAddressPrefix[] = "braid-cuda-ipc-";

std::mutex testing_device_mutex;  // a leaf
std::shared_ptr<device::Device>& TestingDevice() {
  static auto* device = new std::shared_ptr<device::Device>();
  return *device;
}

std::string Rank(int rank) { return "rank " + std::to_string(rank); }

// The blocking frame helpers are shm's (unix_socket.h), shared with the device path's direct set-up.
using shm::RecvFrameBy;
using shm::SendAll;

}  // namespace

struct CudaIpcTransport::State : std::enable_shared_from_this<State> {
  TransportContext context;
  CudaIpcOptions options;
  std::shared_ptr<device::Device> device;
  std::string address;
  int listener = -1;

  std::mutex mutex;  // guards everything below; taken before a link's own mutex
  std::condition_variable stashed;
  std::map<int, int> stash;  // peer rank -> handshaken socket
  std::set<int> claimed;
  Status aborted = Status::Ok();
  std::vector<std::shared_ptr<Link>> links;
  bool wake = false;
  std::condition_variable progress_cv;

  std::atomic<bool> stopping{false};
  std::thread accept_thread;
  std::thread progress_thread;

  Status Aborted() {
    std::lock_guard<std::mutex> lock(mutex);
    return aborted;
  }

  void Wake() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      wake = true;
    }
    progress_cv.notify_one();
  }

  handshake::Party Party() const {
    handshake::Party party;
    party.protocol = kProtocol;
    party.comm_id = context.comm_id;
    party.rank = context.rank;
    party.size = context.size;
    party.secret = context.secret;
    return party;
  }

  // The listener's side of one handshake on an accepted socket; stashes it by peer on success.
  void Handshake(int socket) {
    const Deadline deadline = Deadline::AfterMs(options.handshake_timeout_ms);
    auto aborted_now = [this] { return Aborted(); };
    handshake::Listener listener(Party());
    handshake::Envelope hello, answer;
    int fd = -1;
    Result<size_t> got = RecvFrameBy(socket, &hello, sizeof(hello), &fd, deadline, aborted_now, "cuda_ipc hello");
    if (fd >= 0) ::close(fd);
    if (!got.ok() || got.value() != sizeof(hello) || !handshake::SpeaksProtocol(kProtocol, hello)) {
      ::close(socket);  // a liveness probe, or a stranger: no answer
      return;
    }
    std::string why = listener.OnHello(hello);
    if (why.empty() && !Aborted().ok()) why = "the transport of " + Rank(context.rank) + " is aborted";
    if (why.empty()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (stash.count(listener.peer()) != 0 || claimed.count(listener.peer()) != 0) {
        why = Rank(listener.peer()) + " is already connected";
      }
    }
    if (why.empty()) {
      Status st = listener.WriteChallenge(&answer);
      if (!st.ok()) why = st.message();
    }
    if (!why.empty()) {
      BRAID_LOG(kWarn, context.rank) << "cuda_ipc: refusing a connection: " << why;
      listener.WriteRefusal(why, hello, &answer);
      SendAll(socket, &answer, sizeof(answer), -1, "cuda_ipc refusal").ok();
      ::close(socket);
      return;
    }
    handshake::Envelope proof;
    if (!SendAll(socket, &answer, sizeof(answer), -1, "cuda_ipc challenge").ok() ||
        !RecvFrameBy(socket, &proof, sizeof(proof), &fd, deadline, aborted_now, "cuda_ipc proof").ok()) {
      if (fd >= 0) ::close(fd);
      ::close(socket);
      return;
    }
    if (fd >= 0) ::close(fd);
    bool wrong_secret = false;
    why = listener.OnProof(proof, &wrong_secret);
    if (!why.empty()) {
      BRAID_LOG(kWarn, context.rank) << "cuda_ipc: refusing " << Rank(listener.peer()) << ": " << why;
      listener.WriteRefusal(why, proof, &answer);
      SendAll(socket, &answer, sizeof(answer), -1, "cuda_ipc refusal").ok();
      ::close(socket);
      return;
    }
    listener.WriteAccept(&answer);
    if (!SendAll(socket, &answer, sizeof(answer), -1, "cuda_ipc accept").ok()) {
      ::close(socket);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    stash[listener.peer()] = socket;
    stashed.notify_all();
  }

  // Until stopped or aborted; then closes the listener, so a peer dialing finds nobody there.
  void AcceptLoop() {
    while (!stopping.load() && Aborted().ok()) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int socket = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (socket < 0) continue;
      Handshake(socket);
    }
    ::close(listener);
  }

  void ProgressLoop() {
    int idle = 0;
    std::vector<std::shared_ptr<Link>> snapshot;
    std::vector<pollfd> polls;
    while (!stopping.load()) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        links.erase(std::remove_if(links.begin(), links.end(), [](const std::shared_ptr<Link>& l) { return l->closed(); }),
                    links.end());
        snapshot = links;
        wake = false;
      }
      bool pending = false, worked = false;
      // Sockets first: a peer that is gone gets no more pieces enqueued for it (its sends fail).
      polls.clear();
      for (auto& link : snapshot) polls.push_back(pollfd{link->socket(), POLLIN | POLLRDHUP, 0});
      if (!polls.empty() && ::poll(polls.data(), polls.size(), 0) > 0) {
        for (size_t i = 0; i < polls.size(); ++i) {
          if (polls[i].revents == 0) continue;
          char byte;
          const ssize_t got = ::recv(polls[i].fd, &byte, 1, MSG_DONTWAIT);
          if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            snapshot[i]->PeerGone("its end of the link closed (it closed the link, exited or was killed)");
          }
        }
      }
      for (auto& link : snapshot) worked = link->Progress(&pending) || worked;
      snapshot.clear();
      if (worked) {
        idle = 0;
        continue;
      }
      ++idle;
      if (pending && idle < 64) {
        std::this_thread::yield();
        continue;
      }
      // Nothing pending: sleep until a post wakes us; pending: nap briefly and look again.
      const auto nap = pending ? std::chrono::microseconds(idle < 1000 ? 50 : 500) : std::chrono::microseconds(100000);
      std::unique_lock<std::mutex> lock(mutex);
      progress_cv.wait_for(lock, nap, [this] { return wake || stopping.load(); });
    }
  }

  // Both sides, after the handshake: offer our inbox, map the peer's, acknowledge.
  Result<std::shared_ptr<Link>> MakeLink(int peer, int socket, Deadline deadline) {
    auto aborted_now = [this] { return Aborted(); };
    const std::string what = "cuda_ipc link of " + Rank(context.rank) + " with " + Rank(peer);
    BRAID_ASSIGN_OR_RETURN(std::shared_ptr<Inbox> inbox, Inbox::Create(*device, options.ring_bytes));
    const bool local = shm::PeerPid(socket) == ::getpid();
    uint64_t token = 0;
    Offer offer;
    offer.pid = ::getpid();
    offer.data_bytes = inbox->ring_bytes();
    offer.control_bytes = inbox->control_bytes();
    if (local) {
      token = Inbox::Publish(inbox);
      offer.kind = static_cast<uint16_t>(OfferKind::kLocal);
      offer.token = token;
      BRAID_RETURN_IF_ERROR(SendAll(socket, &offer, sizeof(offer), -1, what));
    } else {
      BRAID_ASSIGN_OR_RETURN(int data_fd, inbox->ExportData(*device));
      offer.kind = static_cast<uint16_t>(OfferKind::kData);
      Status sent = SendAll(socket, &offer, sizeof(offer), data_fd, what);
      ::close(data_fd);
      BRAID_RETURN_IF_ERROR(sent);
      BRAID_ASSIGN_OR_RETURN(int control_fd, inbox->ExportControl());
      offer.kind = static_cast<uint16_t>(OfferKind::kControl);
      sent = SendAll(socket, &offer, sizeof(offer), control_fd, what);
      ::close(control_fd);
      BRAID_RETURN_IF_ERROR(sent);
    }
    Result<std::shared_ptr<Link>> link = [&]() -> Result<std::shared_ptr<Link>> {
      std::shared_ptr<Inbox> outbox;
      Offer theirs;
      int fd = -1;
      auto bad = [&](const std::string& why) {
        if (fd >= 0) ::close(fd);
        return Status::RemoteError(what + ": " + why);
      };
      BRAID_ASSIGN_OR_RETURN(size_t got, RecvFrameBy(socket, &theirs, sizeof(theirs), &fd, deadline, aborted_now, what));
      if (got != sizeof(theirs) || theirs.magic != kOfferMagic || theirs.version != kOfferVersion) {
        return bad("the peer's inbox offer is malformed or of another version");
      }
      if (theirs.kind == static_cast<uint16_t>(OfferKind::kLocal)) {
        if (fd >= 0) ::close(fd);
        outbox = Inbox::Claim(theirs.token);
        if (outbox == nullptr) return Status::RemoteError(what + ": the peer's inbox is not in this process");
      } else {
        if (theirs.kind != static_cast<uint16_t>(OfferKind::kData) || fd < 0) return bad("no staging descriptor");
        const int data_fd = fd;
        const uint64_t data_bytes = theirs.data_bytes;
        fd = -1;
        Result<size_t> control = RecvFrameBy(socket, &theirs, sizeof(theirs), &fd, deadline, aborted_now, what);
        if (!control.ok() || control.value() != sizeof(theirs) ||
            theirs.kind != static_cast<uint16_t>(OfferKind::kControl) || fd < 0) {
          ::close(data_fd);
          if (!control.ok()) return control.status();
          return bad("no control descriptor");
        }
        Result<std::shared_ptr<Inbox>> imported =
            Inbox::Import(*device, data_fd, data_bytes, fd, theirs.control_bytes);
        ::close(data_fd);
        ::close(fd);
        fd = -1;
        if (!imported.ok()) return imported.status().WithContext(what + ": mapping the peer's inbox");
        outbox = std::move(imported.value());
      }
      // Both mapped: acknowledge, and wait for the peer's (after which nobody needs the token).
      Offer ack;
      ack.kind = 4;
      ack.pid = ::getpid();
      BRAID_RETURN_IF_ERROR(SendAll(socket, &ack, sizeof(ack), -1, what));
      BRAID_ASSIGN_OR_RETURN(size_t acked, RecvFrameBy(socket, &ack, sizeof(ack), &fd, deadline, aborted_now, what));
      if (fd >= 0) ::close(fd);
      if (acked != sizeof(ack) || ack.magic != kOfferMagic || ack.kind != 4) {
        return Status::RemoteError(what + ": the peer did not acknowledge the inboxes");
      }
      BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> send_stream, device->NewStream());
      BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> recv_stream, device->NewStream());
      return std::make_shared<Link>(context.rank, peer, socket, device, std::move(send_stream),
                                    std::move(recv_stream), inbox, outbox);
    }();
    if (local) Inbox::Withdraw(token);
    return link;
  }
};

CudaIpcTransport::CudaIpcTransport(std::shared_ptr<State> state) : state_(std::move(state)) {}

void CudaIpcTransport::SetDeviceForTesting(std::shared_ptr<device::Device> device) {
  std::lock_guard<std::mutex> lock(testing_device_mutex);
  TestingDevice() = std::move(device);
}

Result<std::unique_ptr<CudaIpcTransport>> CudaIpcTransport::Create(const TransportContext& context,
                                                                   const CudaIpcOptions& options) {
  std::shared_ptr<device::Device> device = context.device;
  if (device == nullptr) {
    std::lock_guard<std::mutex> lock(testing_device_mutex);
    device = TestingDevice();
  }
  if (device == nullptr || context.size < 2) return std::unique_ptr<CudaIpcTransport>();
  if (context.rank < 0 || context.rank >= context.size) {
    return Status::InvalidArgument("cuda_ipc: rank " + std::to_string(context.rank) + " of " +
                                   std::to_string(context.size));
  }
  // Where this process may not share device memory by descriptor (a driver without it, a sandbox
  // refusing the export), there is no cuda_ipc: the communicator's device work to this host's
  // ranks stays on the host transports instead of failing at its first link.
  if (Status shareable = device::ProbeShareable(*device); !shareable.ok()) {
    BRAID_LOG(kInfo, context.rank) << "cuda_ipc: not available (" << shareable.ToString()
                                   << "); device work goes over the host transports";
    return std::unique_ptr<CudaIpcTransport>();
  }
  auto state = std::make_shared<State>();
  state->context = context;
  state->options = options;
  state->device = device;
  uint64_t random = 0;
  if (::getrandom(&random, sizeof(random), 0) != sizeof(random)) random = static_cast<uint64_t>(::time(nullptr));
  state->address = std::string(kAddressPrefix) + std::to_string(context.comm_id) + "-r" + std::to_string(context.rank) +
                   "-" + std::to_string(::getpid()) + "-" + std::to_string(random % 1000000007);
  BRAID_ASSIGN_OR_RETURN(state->listener, shm::ListenAbstract(state->address));
  State* raw = state.get();
  state->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  state->progress_thread = std::thread([raw] { raw->ProgressLoop(); });
  BRAID_LOG(kInfo, context.rank) << "cuda_ipc: listening at @" << state->address << " on " << device->Describe();
  return std::unique_ptr<CudaIpcTransport>(new CudaIpcTransport(std::move(state)));
}

CudaIpcTransport::~CudaIpcTransport() {
  Abort(Status::Aborted(Rank(state_->context.rank) + ": the cuda_ipc transport was destroyed"));
  state_->stopping.store(true);
  state_->progress_cv.notify_all();
  state_->accept_thread.join();
  state_->progress_thread.join();
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (auto& [peer, socket] : state_->stash) ::close(socket);
  state_->stash.clear();
}

std::string CudaIpcTransport::LocalAddress() const { return state_->address; }

bool CudaIpcTransport::CanConnect(const PeerInfo& self, const PeerInfo& peer) const {
  // Same kernel and network namespace: the abstract sockets the link is made over reach there,
  // and so does the GPU.
  return !self.host.empty() && self.host == peer.host && !self.boot_id.empty() && self.boot_id == peer.boot_id &&
         self.net_ns == peer.net_ns;
}

Result<std::unique_ptr<Connection>> CudaIpcTransport::Connect(int peer, const std::string& peer_address,
                                                              Deadline deadline) {
  State& s = *state_;
  const int rank = s.context.rank;
  if (peer < 0 || peer >= s.context.size || peer == rank) {
    return Status::InvalidArgument("cuda_ipc: " + Rank(rank) + " cannot connect to rank " + std::to_string(peer));
  }
  if (peer_address.compare(0, sizeof(kAddressPrefix) - 1, kAddressPrefix) != 0 || peer_address.size() > 100) {
    return Status::InvalidArgument("cuda_ipc: '" + peer_address + "' is not a cuda_ipc address (" + Rank(peer) + ")");
  }
  BRAID_RETURN_IF_ERROR(s.Aborted());
  int socket = -1;
  if (rank < peer) {
    // Dial, retrying briefly while nobody listens (the peer may still be starting).
    const Deadline dial_by = deadline.Min(1000);
    for (;;) {
      socket = shm::ConnectAbstract(peer_address);
      if (socket >= 0) break;
      if (dial_by.Expired()) {
        if (deadline.Expired()) {
          return Status::Timeout("cuda_ipc: " + Rank(rank) + " could not reach " + Rank(peer) + " before the deadline");
        }
        return PeerGone(rank, peer, "nobody listens at its cuda_ipc address @" + peer_address);
      }
      BRAID_RETURN_IF_ERROR(s.Aborted());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const std::string what = "cuda_ipc handshake of " + Rank(rank) + " with " + Rank(peer);
    auto aborted_now = [&s] { return s.Aborted(); };
    auto fail = [&](const Status& status) {
      ::close(socket);
      return status;
    };
    handshake::Dialer dialer(s.Party(), peer);
    handshake::Envelope hello, challenge, proof, answer;
    Status st = dialer.WriteHello(&hello);
    if (st.ok()) st = SendAll(socket, &hello, sizeof(hello), -1, what);
    if (!st.ok()) return fail(st);
    int fd = -1;
    Result<size_t> got = RecvFrameBy(socket, &challenge, sizeof(challenge), &fd, deadline, aborted_now, what);
    if (fd >= 0) ::close(fd);
    if (!got.ok()) return fail(got.status());
    handshake::Dialer::Verdict verdict = dialer.OnChallenge(challenge, &proof);
    if (verdict.outcome != handshake::Dialer::Outcome::kContinue) {
      return fail(Status::RemoteError(what + ": " + verdict.why));
    }
    st = SendAll(socket, &proof, sizeof(proof), -1, what);
    if (!st.ok()) return fail(st);
    got = RecvFrameBy(socket, &answer, sizeof(answer), &fd, deadline, aborted_now, what);
    if (fd >= 0) ::close(fd);
    if (!got.ok()) return fail(got.status());
    verdict = dialer.OnAnswer(answer);
    if (verdict.outcome != handshake::Dialer::Outcome::kContinue) {
      return fail(Status::RemoteError(what + ": " + verdict.why));
    }
  } else {
    std::unique_lock<std::mutex> lock(s.mutex);
    Result<int> claimed = AwaitStashedLink<int>(
        lock, s.stashed, s.stash, s.claimed, s.aborted, rank, peer, deadline, "cuda_ipc connection",
        "waiting at @" + s.address, [peer_address]() -> std::string {
          std::string detail;
          if (shm::ProbeAbstract(peer_address, &detail) == shm::Listening::kNobody) {
            return "nobody listens at its cuda_ipc address (" + detail + ")";
          }
          return "";
        });
    if (!claimed.ok()) return claimed.status();
    socket = claimed.value();
  }
  Result<std::shared_ptr<Link>> link = s.MakeLink(peer, socket, deadline);
  if (!link.ok()) {
    ::close(socket);
    return link.status();
  }
  Status aborted = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.aborted.ok()) {
      s.links.push_back(link.value());
    } else {
      aborted = s.aborted;
    }
  }
  if (!aborted.ok()) {
    link.value()->Close(aborted);
    return aborted;
  }
  auto connection = std::make_unique<CudaIpcConnection>(link.value());
  std::weak_ptr<State> weak = state_;
  connection->SetWake([weak] {
    if (auto state = weak.lock()) state->Wake();
  });
  BRAID_LOG(kInfo, rank) << "cuda_ipc: linked with " << Rank(peer) << " ("
                         << (shm::PeerPid(link.value()->socket()) == ::getpid() ? "same process: shared pointers"
                                                                               : "another process: descriptors mapped")
                         << ")";
  return std::unique_ptr<Connection>(std::move(connection));
}

void CudaIpcTransport::Abort(const Status& reason) {
  std::vector<std::shared_ptr<Link>> links;
  Status aborted;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->aborted.ok()) {
      state_->aborted = reason.code() == Code::kAborted ? reason : Status::Aborted(reason.message());
    }
    aborted = state_->aborted;
    links = state_->links;
    state_->stashed.notify_all();
  }
  for (auto& link : links) link->Close(aborted);
  state_->progress_cv.notify_all();
}

}  // namespace braid::transport::cuda_ipc
