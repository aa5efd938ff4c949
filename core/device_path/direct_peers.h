// DirectPeers: the memory the ranks of one host share for the device path's direct collectives
// (direct_collectives.h), made once per communicator and mapped by every rank.
//
// What each rank owns and offers its peers:
// - slots: device memory (Device::AllocateShareable: cuMemCreate with POSIX descriptor handles
//   on CUDA, a memfd on the simulation), kSlots slots of slot_bytes, where the rank's stream puts
//   its share of each step for the peers to read;
// - a flag block: host memory (a memfd every rank maps and registers with its device), holding
//   the flags the owner's stream waits on. Each flag has one writer, a peer's stream
//   (WriteValue32 into the owner's block through its mapping), and one waiter, the owner's
//   stream (WaitValue32 on its own block). Why the waits are on the waiter's own memory: an abort,
//   or a peer found dead, releases every wait of this rank by storing into memory this rank owns,
//   without touching a peer's.
// How they are exchanged: each rank listens on an abstract Unix socket and publishes its name,
// pid and in-process token (through `publish`, the communicator's store); the lower rank of each
// pair dials the higher. A peer in another process gets the two descriptors with SCM_RIGHTS and
// maps them (Device::ImportFd; mmap and RegisterHost); a peer thread of this process gets plain
// pointers (CUDA refuses to import in the exporting process). The acceptor checks that the
// dialer's process (SO_PEERCRED) is the one that rank published. The sockets stay open as the
// pairs' liveness signal: end of file without a goodbye means the peer is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/device/device.h"

namespace braid::device_path {

// The flags in one rank's block; entry [p] is written by rank p's stream only.
struct alignas(64) DirectFlag {
  uint32_t value;
};
struct DirectFlagBlock {
  static constexpr int kMaxRanks = device::Stream::kMaxReduceInputs;
  DirectFlag ready[kMaxRanks];     // p's step inputs are in p's slot
  DirectFlag reduced[kMaxRanks];   // p's reduced slice of the step is in p's slot (two-shot)
  DirectFlag consumed[kMaxRanks];  // p has read everything of the step it reads from the owner's slot
};

class DirectPeers {
 public:
  struct Options {
    int rank = 0;
    int size = 0;
    uint64_t comm_id = 0;
    size_t slot_bytes = 0;  // rounded up by the device's granularity, never down
    int slots = 0;
    // Publishes this rank's record under `key` / reads a peer's (waiting for it within the
    // deadline): the communicator's store.
    std::function<Status(const std::string& key, const std::string& value)> publish;
    std::function<Result<std::string>(const std::string& key, Deadline deadline)> read;
    // While waiting for a peer (its record, its dial, its answer): an error when the communicator
    // already knows a peer is gone (its other links), so a rank that died before its first direct
    // operation is named at once rather than at the deadline. Called every 200 ms at most.
    std::function<Status()> still_up;
  };
  // Makes this rank's slots and flag block, exchanges them with every peer and maps theirs.
  // Every rank of the communicator calls it at the same point (its first direct operation).
  // Errors name this rank and the peer: a peer that does not come within the deadline
  // (kTimeout), one that closes or fails (kRemoteError), the device's errors.
  static Result<std::unique_ptr<DirectPeers>> Connect(device::Device& device, Options options, Deadline deadline);
  ~DirectPeers();
  DirectPeers(const DirectPeers&) = delete;
  DirectPeers& operator=(const DirectPeers&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  int slots() const { return slots_; }
  // Rank p's slot k, as this process addresses it (p == rank(): this rank's own).
  char* slot(int p, int k) const { return views_[p].data + static_cast<size_t>(k) * slot_bytes_; }
  // Rank p's flag block (p == rank(): this rank's own).
  DirectFlagBlock* flags(int p) const { return views_[p].flags; }

  // Stores `value` into every flag of this rank's own block (abort: every wait of this rank's
  // stream passes). From any thread.
  void ReleaseOwnWaits(uint32_t value);
  // What LostPeer found: `peer` (-1: nobody) reached end of file without a goodbye covering the
  // steps needed (gone), or said it broke off (`broke_off`: it aborted or failed), naming the rank
  // whose loss or abort started it (`cause`; `application_abort`: braidCommAbort there).
  struct Loss {
    int peer = -1;
    bool broke_off = false;
    int cause = -1;
    bool application_abort = false;
  };
  // Looks at every peer's socket without blocking; a peer gone is reported before one that broke
  // off (the broken-off one is only passing the news on). `needed`: the last step this rank waits
  // for, which a goodbye must cover.
  Loss LostPeer(uint32_t needed);
  // A clean leave: every step up to `last` completed here. Closes the sending side.
  void SayGoodbye(uint32_t last);
  // This rank released its waits (see Loss); the peers' watchers fail naming `cause`.
  void SayBrokeOff(int cause, bool application_abort);

  struct Region;  // direct_peers.cc

 private:
  struct View {
    char* data = nullptr;
    DirectFlagBlock* flags = nullptr;
  };
  struct Link {
    int socket = -1;
    bool gone = false;      // end of file seen
    bool said_bye = false;   // a goodbye came before it
    uint32_t completed = 0;  // ... with the last step it completed
    bool broke_off = false;  // it said it broke off
    int cause = -1;          // ... naming this rank
    bool application_abort = false;
  };
  DirectPeers() = default;
  // Reads whatever frames a peer sent since (goodbyes) and notes end of file. Never blocks.
  void Drain(int p);

  int rank_ = 0;
  int size_ = 0;
  size_t slot_bytes_ = 0;
  int slots_ = 0;
  std::shared_ptr<Region> own_;
  uint64_t token_ = 0;  // own_'s entry in the process's registry, for peer threads
  std::vector<std::shared_ptr<Region>> local_peers_;  // regions of peers in this process
  std::vector<std::unique_ptr<device::Memory>> imported_;  // peers' slots and registrations
  std::vector<std::pair<void*, size_t>> mapped_flags_;     // peers' flag blocks, unmapped last
  std::vector<View> views_;
  std::mutex mu_;  // guards links_ (the watcher, an abort and the destructor reach them); a leaf
  std::vector<Link> links_;
};

}  // namespace braid::device_path
