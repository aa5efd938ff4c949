// One communicator's device work: its own stream, the events that join it to the application's
// stream, the flags that order it against the progress thread, pinned staging buffers, and the
// progress thread that runs each operation's host part.
//
// How one operation flows (k = its number, 1, 2, ... in enqueue order; the same on every rank
// because every rank enqueues in the same order):
//   calling thread (Enqueue; never waits for device work):
//     caller stream: Record(joined)            comm stream: Wait(joined)
//     comm stream:   Copy device -> staging (copy_out), WriteValue32(ready, k),
//                    WaitValue32(done, k), Copy staging -> device (copy_in), Record(slot free),
//                    Record(finished)          caller stream: Wait(finished)
//     then the operation joins the progress thread's queue.
//   progress thread, one operation at a time in queue order:
//     wait (polling, with the communicator's deadline) until ready >= k, run the host part on the
//     staging buffer (a host collective through the host transports), then store done = k.
// No kernel ever waits: the stream waits in WaitValue32 (a front-end wait on the GPU, holding no
// SM), the progress thread polls a flag in pinned memory. A failure in the host part (lost peer,
// timeout, abort) is the communicator's async error (the host part breaks it); its outputs are
// then undefined, but done = k is stored all the same, so the stream never stays blocked.
//
// Thread safety: Enqueue from one thread at a time (the communicator serialises it); ReleaseAll,
// WaitIdle and Idle from any thread.
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

 private:
  struct Slot {
    std::unique_ptr<device::Memory> memory;  // null for an operation with nothing to stage
    std::unique_ptr<device::Event> free;     // recorded after the copy back: then reusable
  };
  struct Item {
    uint32_t number = 0;
    StagedOp op;
    std::unique_ptr<Slot> slot;
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
  Status EnqueueOnStreams(const StagedOp& op, Slot& slot, uint32_t number, void* native);

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
  std::vector<std::unique_ptr<Slot>> retiring_;  // host part done; free once its event completes
  uint32_t enqueued_ = 0;     // the last number handed out
  bool stopping_ = false;
  std::atomic<bool> released_{false};
  std::atomic<uint64_t> outstanding_{0};  // enqueued, host part not finished

  // Declared after the memory it uses, so it is destroyed (and waited for) first.
  std::unique_ptr<device::Stream> stream_;
  std::thread progress_;  // last: starts once everything above exists
};

}  // namespace braid::device_path
