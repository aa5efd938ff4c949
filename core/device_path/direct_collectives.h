// DirectCollectives: device-buffer collectives for a communicator whose ranks all live on this
// host, run entirely by the communicator's stream: the data stays in device memory end to end
// (the caller's buffers and the ranks' shared slots, direct_peers.h), reductions are kernels on
// the stream (Stream::ReduceMany), and ranks order each other only through stream memory
// operations on shared flags. The calling thread enqueues everything and returns; no host thread
// is in the data path (a watcher only looks for failures).
//
// Why: the staged path (device_work_queue.h) copies every byte through pinned host memory and a
// host collective, which caps a GPU at PCIe rates; ranks of one host can read each other's device
// memory instead.
//
// One step (q = 1, 2, ... numbered across operations, the same on every rank: every rank enqueues
// the same operations in the same order and cuts them alike; k = q mod kSlots), rank r, N ranks:
//   [q > kSlots] WaitValue32(own.consumed[p], q - kSlots) for every peer p   (slot k free again)
//   Copy      caller's input chunk -> slot(r, k)
//   WriteValue32(peer p's ready[r], q) for every p
//   WaitValue32(own.ready[p], q) for every p                                   (their inputs are in)
//   one-shot:  ReduceMany(out chunk, slot(0,k) .. slot(N-1,k))                  (folded in rank order)
//   two-shot:  ReduceMany(slot(r,k) slice r, slot(0,k) slice r .. slot(N-1,k) slice r)
//              WriteValue32(peer p's reduced[r], q); WaitValue32(own.reduced[p], q)
//              Copy slot(p,k) slice p -> out, for every p
//   WriteValue32(peer p's consumed[r], q) for every p                           (done reading)
// Every rank folds the ranks in rank order for every element, so all ranks get the same bits, and
// the same bits as a host fold in rank order (tests/collectives/reference.h). allgather,
// broadcast, reducescatter and reduce follow the same steps (direct_collectives.cc). A stream
// waits in WaitValue32 (the GPU's front end, no SM held): nothing spins on the GPU, so ranks that
// are processes sharing one GPU are never stuck behind each other's time slices.
//
// Failures: a watcher thread follows each operation's completion event with the communicator's
// deadline and looks at the peers' sockets; a peer gone without a goodbye, one that broke off, or
// the deadline fails the communicator (through Options::fail, naming the rank) and releases every
// wait of this rank's stream (ReleaseAll: its own flag block is stored past every step). After a
// release the outputs are undefined and later operations are refused.
// Thread safety: Enqueue from one thread at a time (the communicator serialises it); ReleaseAll
// from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/collective.h"
#include "core/base/status.h"
#include "core/device/device.h"
#include "core/device_path/direct_peers.h"

namespace braid::device_path {

class DirectCollectives {
 public:
  // The slots each rank offers: 4 MiB each, triple buffered (a step's slot is refilled while the
  // two later ones are read), so a large message moves in 4 MiB steps.
  static constexpr size_t kSlotBytes = size_t{4} << 20;
  static constexpr int kSlots = 3;
  // An allreduce step of at least this many bytes runs two-shot. Why: one-shot has every rank read
  // all N chunks (N times the data each, N^2 in all) but needs one flag round; two-shot reads each
  // byte once per rank and writes it once, for a second flag round. Small messages are bound by the
  // flag rounds, large ones by memory traffic. 256 KiB is a first guess (where N = 2's extra read
  // costs ~0.1 us at the H100's ~3 TB/s, about a flag round); the GPU run is to measure it.
  static constexpr size_t kTwoShotFromBytes = size_t{256} << 10;

  struct Options {
    int rank = 0;
    int size = 0;
    int64_t timeout_ms = 30 * 60 * 1000;
    // Breaks the communicator with `error` (from the watcher or the enqueuing thread).
    std::function<void(const Status& error)> fail;
  };

  // Whether this path runs `kind` (others stay on the staged path).
  static bool Handles(algorithms::Collective kind);

  static Result<std::unique_ptr<DirectCollectives>> Create(device::Device& device, std::unique_ptr<DirectPeers> peers,
                                                           Options options);
  // Waits (bounded) for the enqueued work, tells the peers this rank is done, stops the watcher.
  ~DirectCollectives();
  DirectCollectives(const DirectCollectives&) = delete;
  DirectCollectives& operator=(const DirectCollectives&) = delete;

  // Enqueues `args` (device buffers, validated) on `comm`, the communicator's stream, joined to the
  // application's stream `native` (null: the legacy default stream) by events, and returns.
  // kAborted after ReleaseAll; the device's errors (then the communicator is failed and released).
  Status Enqueue(const algorithms::CollectiveArgs& args, device::Stream& comm, void* native);

  // Abort, or a failure: stores every flag this rank's stream waits on past every enqueued step, so
  // the stream goes on at once; tells the peers (their watchers fail naming `cause`, the rank whose
  // loss or abort started it, or the cause this rank's watcher found); later Enqueue calls fail.
  // From any thread; the first call counts.
  void ReleaseAll(int cause, bool application_abort);

  // The last step number handed out (diagnostics and tests).
  uint32_t steps() const;

 private:
  struct Pending {
    uint32_t last = 0;  // the operation's last step
    std::unique_ptr<device::Event> done;
    std::string what;
  };
  DirectCollectives(device::Device& device, std::unique_ptr<DirectPeers> peers, Options options);
  void Watch();
  // The step bodies (direct_collectives.cc); each enqueues its steps on `s`.
  Status Reduction(const algorithms::CollectiveArgs& args, device::Stream& s);  // allreduce, reduce
  Status AllGather(const algorithms::CollectiveArgs& args, device::Stream& s);
  Status Broadcast(const algorithms::CollectiveArgs& args, device::Stream& s);
  Status ReduceScatter(const algorithms::CollectiveArgs& args, device::Stream& s);
  // A new step number, with its slot made free (waits for every peer's consumed of its last use).
  Result<uint32_t> BeginStep(device::Stream& s);
  enum class Flag { kReady, kReduced, kConsumed };
  // WriteValue32(flag[rank] in every peer's block, q).
  Status Announce(device::Stream& s, Flag flag, uint32_t q);
  // WaitValue32(own flag[p], q) for every peer p (or only `only`).
  Status Await(device::Stream& s, Flag flag, uint32_t q, int only = -1);
  char* Slot(int p, uint32_t q) const { return peers_->slot(p, static_cast<int>(q % kSlots)); }

  device::Device& device_;
  std::unique_ptr<DirectPeers> peers_;
  const Options options_;
  const int rank_;
  const int size_;
  std::unique_ptr<device::Event> joined_;  // caller stream -> comm stream

  mutable std::mutex mu_;  // guards the members below; a leaf (options_.fail is called without it)
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  std::vector<std::unique_ptr<device::Event>> spare_events_;
  std::atomic<uint32_t> seq_{0};  // written by the enqueuing thread; read by ReleaseAll
  bool released_ = false;
  int noted_cause_ = -1;  // set by the watcher before it fails the communicator
  bool noted_abort_ = false;
  bool stopping_ = false;
  std::thread watcher_;  // last: starts once everything above exists
};

}  // namespace braid::device_path
