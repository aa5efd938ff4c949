// One communicator's device work: its own stream, the events that join it to the application's
// stream, the flags that order it against the progress thread, pinned staging slots, and the
// progress thread that runs each operation's host part.
//
// How one operation flows: it comes as steps (staged_op.h: a large message cut into chunks, a
// small one a single step); each step gets a number k, 1, 2, ... in enqueue order, the same on
// every rank because every rank enqueues in the same order and cuts alike. An operation of N
// steps takes S = min(N, kPipelineSlots) staging slots; step j uses slot j mod S.
//   calling thread (Enqueue; never waits for device work):
//     caller stream: Record(joined)            comm stream: Wait(joined)
//     comm stream:   for the first S steps: Copy device -> slot (copy_out), WriteValue32(ready, k)
//                    for each step j: WaitValue32(done, k_j), Copy slot -> device (copy_in),
//                                     then stage step j + S into the slot just emptied
//                    Record(slot free) for every slot, Record(finished)
//     caller stream: Wait(finished)
//     then the operation joins the progress thread's queue.
//   progress thread, one step at a time in number order:
//     wait (polling, with the communicator's deadline) until ready >= k, run the step's host part
//     on its slot (a host collective through the host transports), then store done = k.
// Why this pipelines: while the progress thread runs step j's host collective, the stream, which
// only waits for done = k_j after it, copies step j - 1's results back and steps j + 1 .. j + S - 1
// out, so the copies overlap the wire instead of adding to it. The slot that step j + S reuses is
// step j's, written after step j's copy back on the same stream (stream order keeps the two
// apart) and read by the host only after ready says it is staged. One stream carries both
// directions, so the two copies take turns with each other (a GPU could run them on two copy
// engines from two streams); what they overlap is the host collective, the longer part.
// No kernel ever waits: the stream waits in WaitValue32 (a front-end wait on the GPU, holding no
// SM), the progress thread polls a flag in pinned memory. A failure in a host part (lost peer,
// timeout, abort) is the communicator's async error (the host part breaks it); the operation's
// later steps are then skipped and its outputs undefined, but done is stored for every step all
// the same, so the stream never stays blocked.
//
// Thread safety: Enqueue from one thread at a time (the communicator serialises it); ReleaseAll,
// WaitIdle, Idle and StagedThrough from any thread.
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

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/device/device.h"
#include "core/device_path/staged_op.h"

namespace braid::device_path {

class DeviceWorkQueue {
 public:
  // Staging slots one operation cycles through: step j + 2 is copied out while step j's host
  // collective runs, step j - 1 copied back (triple buffering; 2 would stage one step ahead).
  static constexpr size_t kPipelineSlots = 3;

  struct Options {
    int rank = 0;
    // How long the progress thread waits for an operation's inputs to be staged (the
    // application's stream reaching the operation) before it fails the communicator.
    int64_t timeout_ms = 30 * 60 * 1000;
    // Breaks the communicator with `error` (a timeout waiting for the stream, a host part that
    // failed without breaking it, a device error at enqueue). Called on the progress thread or
    // the enqueuing thread.
    std::function<void(const Status& error)> fail;
  };

  static Result<std::unique_ptr<DeviceWorkQueue>> Create(device::Device* device, Options options);
  // Runs what is queued (each host part fails at once on a broken communicator), stops the
  // progress thread, then waits (bounded) for the stream before freeing staging memory.
  ~DeviceWorkQueue();
  DeviceWorkQueue(const DeviceWorkQueue&) = delete;
  DeviceWorkQueue& operator=(const DeviceWorkQueue&) = delete;

  // Enqueues `op` on the application's stream `native` (null: the legacy default stream) and
  // returns. Errors: the device's (enqueue failed; the communicator is failed too), or kAborted
  // after ReleaseAll.
  Status Enqueue(StagedOp op, void* native);

  // Abort: stores done = the last enqueued number, so every stream wait of this queue is released
  // now, whatever the progress thread is doing; later Enqueue calls fail. From any thread.
  void ReleaseAll();

  // Blocks until the progress thread has finished the host part of everything enqueued so far
  // (a host-buffer call must not overtake queued device work: ranks would disagree on order), or
  // the deadline (kTimeout).
  Status WaitIdle(Deadline deadline);
  // Whether nothing is queued or running. One load.
  bool Idle() const { return outstanding_.load(std::memory_order_acquire) == 0; }
  // Whether the caller is the progress thread (which must never wait for the queue).
  bool OnProgressThread() const { return std::this_thread::get_id() == progress_.get_id(); }
  // The number of the last step whose inputs the stream has staged (the `ready` flag; steps are
  // numbered from 1 in enqueue order). One load; for diagnostics and the pipeline's tests, which
  // watch later steps being staged while a host part runs.
  uint32_t StagedThrough() const;
  // The communicator's stream. The direct path (direct_collectives.h) enqueues on it too, under
  // the same serialisation as Enqueue, so both paths' work runs in issue order.
  device::Stream& stream() { return *stream_; }

 private:
  struct Slot {
    std::unique_ptr<device::Memory> memory;  // null for an operation with nothing to stage
    std::unique_ptr<device::Event> free;     // recorded after the copy back: then reusable
  };
  struct Item {
    uint32_t first = 0;  // the number of step 0; step j is first + j
    StagedOp op;
    std::vector<std::unique_ptr<Slot>> slots;  // step j uses slots[j % slots.size()]
    bool enqueue_failed = false;  // the stream may not write `ready`: skip to done
  };

  DeviceWorkQueue(device::Device* device, Options options);
  void Run();
  // Waits until the stream has stored ready >= number, the deadline, or ReleaseAll.
  Status AwaitReady(uint32_t number, const std::string& what);
  // Stores done = number unless done is already past it (ReleaseAll may have run ahead).
  void AdvanceDone(uint32_t number);
  // A free slot of at least `bytes` (reusing one whose last use completed), or a new one.
  Result<std::unique_ptr<Slot>> TakeSlot(size_t bytes);
  Status EnqueueOnStreams(const StagedOp& op, const std::vector<std::unique_ptr<Slot>>& slots, uint32_t first,
                          void* native);
  // The host part of every step of `item`, in order; done advanced past each.
  void RunSteps(Item& item);

  device::Device* const device_;
  const Options options_;
  std::unique_ptr<device::Memory> flags_;  // [0]: ready (stream -> host), [16]: done (host -> stream)
  uint32_t* ready_ = nullptr;
  uint32_t* done_ = nullptr;
  std::unique_ptr<device::Event> joined_;    // caller stream -> comm stream
  std::unique_ptr<device::Event> finished_;  // comm stream -> caller stream

  // Lock order: mu_ is a leaf (the host part runs without it).
  std::mutex mu_;
  std::condition_variable work_;  // the progress thread waits for items
  std::condition_variable idle_;  // WaitIdle waits for outstanding_ == 0
  std::deque<Item> queue_;
  std::vector<std::unique_ptr<Slot>> free_slots_;
  std::vector<std::unique_ptr<Slot>> retiring_;  // host parts done; free once its event completes
  uint32_t enqueued_ = 0;     // the last step number handed out
  bool stopping_ = false;
  std::atomic<bool> released_{false};
  std::atomic<uint64_t> outstanding_{0};  // enqueued, host part not finished

  // Declared after the memory it uses, so it is destroyed (and waited for) first.
  std::unique_ptr<device::Stream> stream_;
  std::thread progress_;  // last: starts once everything above exists
};

}  // namespace braid::device_path
