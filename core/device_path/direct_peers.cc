#include "core/device_path/direct_peers.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <new>
#include <sstream>

#include "transport/shm/unix_socket.h"

namespace braid::device_path {

// One rank's own memory: what its peers map.
struct DirectPeers::Region {
  std::unique_ptr<device::Memory> slots;
  int flags_fd = -1;
  DirectFlagBlock* flags = nullptr;
  size_t flags_bytes = 0;
  std::unique_ptr<device::Memory> registration;  // RegisterHost of the flag block
  ~Region() {
    registration.reset();  // unregister before unmapping
    if (flags != nullptr) munmap(flags, flags_bytes);
    if (flags_fd >= 0) close(flags_fd);
  }
};

namespace {

constexpr uint32_t kMagic = 0x52494442u;  // "BDIR"
constexpr uint16_t kVersion = 1;

// Frames on a pair's socket. An offer across processes is two frames (slots, then flags), each
// with its descriptor attached; between threads of one process one frame with the token.
enum class FrameKind : uint16_t { kSlots = 1, kFlags = 2, kLocal = 3, kGoodbye = 4, kBrokeOff = 5 };
struct Frame {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t kind = 0;
  uint64_t comm_id = 0;
  int32_t rank = 0;
  int32_t pid = 0;
  uint64_t token = 0;  // kLocal: the region in this process's registry
  uint64_t bytes = 0;  // kSlots / kFlags: the mapping's size
  uint32_t completed = 0;  // kGoodbye: the last step the sender completed
  int32_t cause = -1;      // kBrokeOff: the rank whose loss or abort started it
  uint32_t application_abort = 0;  // kBrokeOff: braidCommAbort at `cause`
  uint32_t reserved = 0;
};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }
std::string Rank(int rank) { return "rank " + std::to_string(rank); }

size_t FlagBytes() { return (sizeof(DirectFlagBlock) + 4095) / 4096 * 4096; }

// Regions of this process, by token, for peer threads (weak: the owner's DirectPeers keeps it).
std::mutex registry_mutex;  // a leaf
std::map<uint64_t, std::weak_ptr<DirectPeers::Region>>& Registry() {
  static auto* registry = new std::map<uint64_t, std::weak_ptr<DirectPeers::Region>>();
  return *registry;
}

// A published record: "<pid> <token> <socket name>".
struct Record {
  int pid = 0;
  uint64_t token = 0;
  std::string name;
};
std::string Serialize(const Record& r) { return std::to_string(r.pid) + " " + std::to_string(r.token) + " " + r.name; }
Result<Record> Parse(const std::string& text, int peer) {
  std::istringstream in(text);
  Record r;
  if (!(in >> r.pid >> r.token >> r.name)) {
    return Status::RemoteError("direct device path: " + Rank(peer) + "'s record '" + text + "' is malformed");
  }
  return r;
}

std::string Key(int rank) { return "device_direct/" + std::to_string(rank); }


Result<std::shared_ptr<DirectPeers::Region>> MakeRegion(device::Device& device, size_t bytes) {
  auto region = std::make_shared<DirectPeers::Region>();
  BRAID_ASSIGN_OR_RETURN(region->slots, device.AllocateShareable(bytes));
  region->flags_bytes = FlagBytes();
  region->flags_fd = memfd_create("braid-direct-flags", MFD_CLOEXEC);
  if (region->flags_fd < 0) return Status::SystemError(Errno("memfd_create for the direct path's flags"));
  if (ftruncate(region->flags_fd, static_cast<off_t>(region->flags_bytes)) != 0) {
    return Status::SystemError(Errno("sizing the direct path's flags"));
  }
  void* map = mmap(nullptr, region->flags_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region->flags_fd, 0);
  if (map == MAP_FAILED) return Status::SystemError(Errno("mapping the direct path's flags"));
  region->flags = new (map) DirectFlagBlock();
  BRAID_ASSIGN_OR_RETURN(region->registration, device.RegisterHost(map, region->flags_bytes));
  return region;
}

}  // namespace

Result<std::unique_ptr<DirectPeers>> DirectPeers::Connect(device::Device& device, Options options,
                                                          Deadline deadline) {
  const int rank = options.rank;
  const int size = options.size;
  const std::string me = Rank(rank) + ": direct device path";
  if (size < 2 || size > DirectFlagBlock::kMaxRanks || rank < 0 || rank >= size || options.slots < 1 ||
      options.slot_bytes == 0) {
    return Status::InvalidArgument(me + ": " + std::to_string(size) + " ranks, " + std::to_string(options.slots) +
                                   " slots of " + std::to_string(options.slot_bytes) + " bytes");
  }
  std::unique_ptr<DirectPeers> peers(new DirectPeers());
  peers->rank_ = rank;
  peers->size_ = size;
  peers->slots_ = options.slots;
  auto region = MakeRegion(device, options.slot_bytes * static_cast<size_t>(options.slots));
  if (!region.ok()) return region.status().WithContext(me + ": making its slots and flags");
  peers->own_ = std::move(region).value();
  peers->slot_bytes_ = options.slot_bytes;
  peers->views_.assign(size, View{});
  peers->views_[rank] = {static_cast<char*>(peers->own_->slots->data()), peers->own_->flags};
  peers->links_.assign(size, Link{});
  peers->local_peers_.assign(size, nullptr);

  static std::atomic<uint64_t> next_token{1};
  const uint64_t token = (static_cast<uint64_t>(::getpid()) << 32) | next_token.fetch_add(1);
  {
    // Until this DirectPeers goes: a peer thread may take the offer after Connect returned here.
    std::lock_guard<std::mutex> lock(registry_mutex);
    Registry()[token] = peers->own_;
    peers->token_ = token;
  }

  uint64_t random = 0;
  if (getrandom(&random, sizeof(random), 0) != sizeof(random)) random = static_cast<uint64_t>(::getpid()) * 2654435761u;
  const std::string name = "braid-direct-" + std::to_string(options.comm_id) + "-r" + std::to_string(rank) + "-" +
                           std::to_string(::getpid()) + "-" + std::to_string(random % 1000000007);
  auto listening = transport::shm::ListenAbstract(name);
  if (!listening.ok()) return listening.status().WithContext(me + ": listening");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } listener{listening.value()};
  BRAID_RETURN_IF_ERROR(options.publish(Key(rank), Serialize({::getpid(), token, name})).WithContext(me + ": publishing"));

  // The communicator's view of its peers, asked at most every 200 ms while waiting here.
  auto last_look = std::chrono::steady_clock::now();
  auto still_up = [&]() -> Status {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_look < std::chrono::milliseconds(200) || !options.still_up) return Status::Ok();
    last_look = now;
    return options.still_up().WithContext(me + ": waiting for its peers");
  };
  std::vector<Record> records(size);
  auto record_of = [&](int peer) -> Status {
    if (!records[peer].name.empty()) return Status::Ok();
    for (;;) {
      // In slices: a rank that died before its first direct operation never publishes.
      const Deadline slice(std::min(deadline.when(), Deadline::AfterMs(200).when()));
      auto text = options.read(Key(peer), slice);
      if (text.ok()) {
        BRAID_ASSIGN_OR_RETURN(records[peer], Parse(text.value(), peer));
        return Status::Ok();
      }
      if (text.status().code() != Code::kTimeout || deadline.Expired()) {
        return text.status().WithContext(me + ": reading " + Rank(peer) + "'s record");
      }
      BRAID_RETURN_IF_ERROR(still_up());
    }
  };
  auto offer = [&](int socket, int peer, bool local) -> Status {
    const std::string what = me + ": offering its memory to " + Rank(peer);
    Frame frame;
    frame.comm_id = options.comm_id;
    frame.rank = rank;
    frame.pid = ::getpid();
    if (local) {
      frame.kind = static_cast<uint16_t>(FrameKind::kLocal);
      frame.token = token;
      return transport::shm::SendAll(socket, &frame, sizeof(frame), -1, what);
    }
    BRAID_ASSIGN_OR_RETURN(int slots_fd, device.ExportFd(*peers->own_->slots));
    frame.kind = static_cast<uint16_t>(FrameKind::kSlots);
    frame.bytes = peers->own_->slots->size();
    Status sent = transport::shm::SendAll(socket, &frame, sizeof(frame), slots_fd, what);
    close(slots_fd);
    BRAID_RETURN_IF_ERROR(sent);
    frame.kind = static_cast<uint16_t>(FrameKind::kFlags);
    frame.bytes = peers->own_->flags_bytes;
    return transport::shm::SendAll(socket, &frame, sizeof(frame), peers->own_->flags_fd, what);
  };
  // Receives `peer`'s offer on `socket` and maps it (`first` already read, with the descriptor
  // `first_fd` that came with it, when not null).
  auto take = [&](int socket, int peer, const Frame* first, int first_fd) -> Status {
    const std::string what = me + ": receiving " + Rank(peer) + "'s memory";
    Frame frame;
    int fd = -1;
    if (first != nullptr) {
      frame = *first;
      fd = first_fd;
    } else {
      BRAID_RETURN_IF_ERROR(
          transport::shm::RecvFrameBy(socket, &frame, sizeof(frame), &fd, deadline, still_up, what).status());
    }
    auto bad = [&](const std::string& why) {
      if (fd >= 0) close(fd);
      return Status::RemoteError(what + ": " + why);
    };
    if (frame.magic != kMagic || frame.version != kVersion || frame.comm_id != options.comm_id || frame.rank != peer) {
      return bad("a frame of another protocol, communicator or rank");
    }
    if (frame.kind == static_cast<uint16_t>(FrameKind::kLocal)) {
      std::shared_ptr<Region> theirs;
      {
        std::lock_guard<std::mutex> lock(registry_mutex);
        auto it = Registry().find(frame.token);
        if (it != Registry().end()) theirs = it->second.lock();
      }
      if (theirs == nullptr) return bad("its region is not in this process");
      peers->views_[peer] = {static_cast<char*>(theirs->slots->data()), theirs->flags};
      peers->local_peers_[peer] = std::move(theirs);
      return Status::Ok();
    }
    if (frame.kind != static_cast<uint16_t>(FrameKind::kSlots) || fd < 0) return bad("no slots descriptor");
    if (frame.bytes < options.slot_bytes * static_cast<size_t>(options.slots)) {
      return bad("its slots have " + std::to_string(frame.bytes) + " bytes, fewer than this rank's");
    }
    auto slots = device.ImportFd(fd, frame.bytes);
    close(fd);
    fd = -1;
    if (!slots.ok()) return slots.status().WithContext(what);
    Frame flags;
    BRAID_RETURN_IF_ERROR(
        transport::shm::RecvFrameBy(socket, &flags, sizeof(flags), &fd, deadline, still_up, what).status());
    struct stat st;
    if (flags.kind != static_cast<uint16_t>(FrameKind::kFlags) || fd < 0 || flags.bytes != FlagBytes() ||
        fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != FlagBytes()) {
      return bad("no flag block of " + std::to_string(FlagBytes()) + " bytes");
    }
    void* map = mmap(nullptr, FlagBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return Status::SystemError(Errno(what + ": mapping its flags"));
    peers->mapped_flags_.push_back({map, FlagBytes()});
    auto registered = device.RegisterHost(map, FlagBytes());
    if (!registered.ok()) return registered.status().WithContext(what + ": registering its flags");
    peers->views_[peer] = {static_cast<char*>(slots.value()->data()), static_cast<DirectFlagBlock*>(map)};
    peers->imported_.push_back(std::move(slots).value());
    peers->imported_.push_back(std::move(registered).value());
    return Status::Ok();
  };

  // 1. Dial every higher rank and offer (their sockets take the frames before they accept).
  for (int p = rank + 1; p < size; ++p) {
    BRAID_RETURN_IF_ERROR(record_of(p));
    const int socket = transport::shm::ConnectAbstract(records[p].name);
    if (socket < 0) return Status::RemoteError(Errno(me + ": dialing " + Rank(p)));
    peers->links_[p].socket = socket;
    BRAID_RETURN_IF_ERROR(offer(socket, p, records[p].pid == ::getpid()));
  }
  // 2. Accept every lower rank: check who dialed, take its offer, answer with this rank's.
  for (int accepted = 0; accepted < rank;) {
    pollfd p{listener.fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(deadline.RemainingMs() + 1, 50)));
    const int socket = ::accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (socket < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Status::SystemError(Errno(me + ": accepting"));
      BRAID_RETURN_IF_ERROR(still_up());
      if (deadline.Expired()) {
        return Status::Timeout(me + ": only " + std::to_string(accepted) + " of the " + std::to_string(rank) +
                               " lower ranks dialed within the deadline");
      }
      continue;
    }
    Frame first;
    int fd = -1;
    auto got = transport::shm::RecvFrameBy(socket, &first, sizeof(first), &fd, deadline, still_up,
                                           me + ": a dialer's first frame");
    const int peer = got.ok() ? first.rank : -1;
    Status checked = got.status();
    if (checked.ok() && (first.magic != kMagic || peer < 0 || peer >= rank || peers->links_[peer].socket >= 0)) {
      checked = Status::RemoteError(me + ": a dialer that is no lower rank of this communicator");
    }
    if (checked.ok()) checked = record_of(peer);
    if (checked.ok() && transport::shm::PeerPid(socket) != records[peer].pid) {
      checked = Status::RemoteError(me + ": a dialer claiming to be " + Rank(peer) + " from another process");
    }
    if (!checked.ok()) {
      // A stranger (or a broken peer) is dropped; a real peer that failed would fail the same way
      // at the deadline, named there.
      if (fd >= 0) close(fd);
      close(socket);
      continue;
    }
    peers->links_[peer].socket = socket;
    BRAID_RETURN_IF_ERROR(take(socket, peer, &first, fd));
    BRAID_RETURN_IF_ERROR(offer(socket, peer, records[peer].pid == ::getpid()));
    ++accepted;
  }
  // 3. The higher ranks' answers.
  for (int p = rank + 1; p < size; ++p) BRAID_RETURN_IF_ERROR(take(peers->links_[p].socket, p, nullptr, -1));
  return peers;
}

DirectPeers::~DirectPeers() {
  if (token_ != 0) {
    std::lock_guard<std::mutex> lock(registry_mutex);
    Registry().erase(token_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Link& link : links_) {
      if (link.socket >= 0) close(link.socket);
      link.socket = -1;
    }
  }
  imported_.clear();  // slots and flag registrations before the flags' mappings
  for (const auto& [map, bytes] : mapped_flags_) munmap(map, bytes);
}

void DirectPeers::ReleaseOwnWaits(uint32_t value) {
  DirectFlagBlock* block = own_->flags;
  for (int p = 0; p < DirectFlagBlock::kMaxRanks; ++p) {
    for (DirectFlag* flag : {&block->ready[p], &block->reduced[p], &block->consumed[p]}) {
      __atomic_store_n(&flag->value, value, __ATOMIC_RELEASE);
    }
  }
}

void DirectPeers::Drain(int p) {
  Link& link = links_[p];
  while (link.socket >= 0 && !link.gone) {
    Frame frame;
    int fd = -1;
    bool truncated = false;
    const ssize_t got = transport::shm::RecvFrame(link.socket, &frame, sizeof(frame), &fd, &truncated);
    if (fd >= 0) close(fd);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      link.gone = true;
    } else if (got < 0) {
      return;
    } else if (frame.magic == kMagic && frame.kind == static_cast<uint16_t>(FrameKind::kGoodbye)) {
      link.said_bye = true;
      link.completed = frame.completed;
    } else if (frame.magic == kMagic && frame.kind == static_cast<uint16_t>(FrameKind::kBrokeOff)) {
      link.broke_off = true;
      link.cause = frame.cause;
      link.application_abort = frame.application_abort != 0;
    }
  }
}

DirectPeers::Loss DirectPeers::LostPeer(uint32_t needed) {
  std::lock_guard<std::mutex> lock(mu_);
  Loss loss;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Drain(p);
    const Link& link = links_[p];
    const bool covered = link.said_bye && static_cast<int32_t>(link.completed - needed) >= 0;
    if (link.gone && !link.broke_off && !covered) return Loss{p, false, p, false};
    if (link.broke_off && loss.peer < 0) loss = Loss{p, true, link.cause, link.application_abort};
  }
  return loss;
}

namespace {
void SendToAll(const std::vector<int>& sockets, const Frame& frame) {
  for (int socket : sockets) {
    (void)transport::shm::SendFrame(socket, &frame, sizeof(frame));
    ::shutdown(socket, SHUT_WR);
  }
}
}  // namespace

void DirectPeers::SayGoodbye(uint32_t last) {
  Frame frame;
  frame.kind = static_cast<uint16_t>(FrameKind::kGoodbye);
  frame.rank = rank_;
  frame.completed = last;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> sockets;
  for (const Link& link : links_) {
    if (link.socket >= 0) sockets.push_back(link.socket);
  }
  SendToAll(sockets, frame);
}

void DirectPeers::SayBrokeOff(int cause, bool application_abort) {
  Frame frame;
  frame.kind = static_cast<uint16_t>(FrameKind::kBrokeOff);
  frame.rank = rank_;
  frame.cause = cause;
  frame.application_abort = application_abort ? 1 : 0;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> sockets;
  for (const Link& link : links_) {
    if (link.socket >= 0) sockets.push_back(link.socket);
  }
  SendToAll(sockets, frame);
}

}  // namespace braid::device_path
