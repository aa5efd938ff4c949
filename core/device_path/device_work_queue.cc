#include "core/device_path/device_work_queue.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace braid::device_path {
namespace {

uint32_t LoadFlag(const uint32_t* flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }
// Cyclic, as cuStreamWaitValue32's GEQ: a wrapping counter keeps working.
bool Reached(uint32_t current, uint32_t value) { return static_cast<int32_t>(current - value) >= 0; }

constexpr size_t kDoneOffset = 16;  // the two flags on different words of one small allocation

}  // namespace

Result<std::unique_ptr<DeviceWorkQueue>> DeviceWorkQueue::Create(device::Device* device, Options options) {
  if (device == nullptr) return Status::InvalidUsage("device work queue without a device");
  std::unique_ptr<DeviceWorkQueue> queue(new DeviceWorkQueue(device, std::move(options)));
  const std::string who = "rank " + std::to_string(queue->options_.rank) + ": device path on " + device->Describe();
  auto flags = device->AllocateHost(64);
  if (!flags.ok()) return flags.status().WithContext(who + ": allocating its flags");
  queue->flags_ = std::move(flags).value();
  queue->ready_ = static_cast<uint32_t*>(queue->flags_->data());
  queue->done_ = reinterpret_cast<uint32_t*>(static_cast<char*>(queue->flags_->data()) + kDoneOffset);
  auto joined = device->NewEvent();
  if (!joined.ok()) return joined.status().WithContext(who);
  queue->joined_ = std::move(joined).value();
  auto finished = device->NewEvent();
  if (!finished.ok()) return finished.status().WithContext(who);
  queue->finished_ = std::move(finished).value();
  auto stream = device->NewStream();
  if (!stream.ok()) return stream.status().WithContext(who + ": creating the communicator's stream");
  queue->stream_ = std::move(stream).value();
  DeviceWorkQueue* raw = queue.get();
  queue->progress_ = std::thread([raw] { raw->Run(); });
  return queue;
}

DeviceWorkQueue::DeviceWorkQueue(device::Device* device, Options options)
    : device_(device), options_(std::move(options)) {}

DeviceWorkQueue::~DeviceWorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    work_.notify_all();
  }
  if (progress_.joinable()) progress_.join();
  // The copies back may still be running on the stream; staging is freed only after it
  // (bounded: a stream blocked by the application's own stream is left to the stream's
  // destructor contract).
  if (stream_ != nullptr) (void)stream_->Synchronize(Deadline::AfterMs(5000));
}

Result<std::unique_ptr<DeviceWorkQueue::Slot>> DeviceWorkQueue::TakeSlot(size_t bytes) {
  // Caller holds mu_. Slots whose copy back has completed become free first.
  for (size_t i = 0; i < retiring_.size();) {
    auto done = retiring_[i]->free->Query();
    if (done.ok() && done.value()) {
      free_slots_.push_back(std::move(retiring_[i]));
      retiring_[i] = std::move(retiring_.back());
      retiring_.pop_back();
    } else {
      ++i;
    }
  }
  std::unique_ptr<Slot> slot;
  for (size_t i = 0; i < free_slots_.size(); ++i) {
    const size_t has = free_slots_[i]->memory ? free_slots_[i]->memory->size() : 0;
    if (has >= bytes) {
      slot = std::move(free_slots_[i]);
      free_slots_.erase(free_slots_.begin() + static_cast<long>(i));
      return slot;
    }
  }
  if (!free_slots_.empty()) {  // too small: its last use is complete, so it may be regrown
    slot = std::move(free_slots_.back());
    free_slots_.pop_back();
  } else {
    slot = std::make_unique<Slot>();
    BRAID_ASSIGN_OR_RETURN(slot->free, device_->NewEvent());
  }
  if (bytes > 0) {
    slot->memory.reset();
    // Grown by half again, so a slowly growing size does not reallocate every call.
    BRAID_ASSIGN_OR_RETURN(slot->memory, device_->AllocateHost(bytes + bytes / 2));
  }
  return slot;
}

Status DeviceWorkQueue::EnqueueOnStreams(const StagedOp& op, const std::vector<std::unique_ptr<Slot>>& slots,
                                         uint32_t first, void* native) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> caller, device_->WrapStream(native));
  const size_t steps = op.steps.size();
  const size_t ring = slots.size();
  auto slot_of = [&](size_t j) -> char* {
    const auto& memory = slots[j % ring]->memory;
    return memory ? static_cast<char*>(memory->data()) : nullptr;
  };
  // Step j's inputs into its slot, then ready = its number.
  auto stage_out = [&](size_t j) -> Status {
    char* slot = slot_of(j);
    for (const StagedCopy& c : op.steps[j].copy_out) BRAID_RETURN_IF_ERROR(stream_->Copy(slot + c.offset, c.device, c.bytes));
    return stream_->WriteValue32(ready_, first + static_cast<uint32_t>(j));
  };
  BRAID_RETURN_IF_ERROR(caller->Record(*joined_));
  BRAID_RETURN_IF_ERROR(stream_->Wait(*joined_));
  for (size_t j = 0; j < ring && j < steps; ++j) BRAID_RETURN_IF_ERROR(stage_out(j));
  for (size_t j = 0; j < steps; ++j) {
    BRAID_RETURN_IF_ERROR(stream_->WaitValue32(done_, first + static_cast<uint32_t>(j)));
    char* slot = slot_of(j);
    for (const StagedCopy& c : op.steps[j].copy_in) BRAID_RETURN_IF_ERROR(stream_->Copy(c.device, slot + c.offset, c.bytes));
    // The slot step j just gave back, refilled behind its copy back on the same stream.
    if (j + ring < steps) BRAID_RETURN_IF_ERROR(stage_out(j + ring));
  }
  for (const auto& slot : slots) BRAID_RETURN_IF_ERROR(stream_->Record(*slot->free));
  BRAID_RETURN_IF_ERROR(stream_->Record(*finished_));
  return caller->Wait(*finished_);
}

Status DeviceWorkQueue::Enqueue(StagedOp op, void* native) {
  if (op.steps.empty()) return Status::Internal("rank " + std::to_string(options_.rank) + ": " + op.what + " has no steps");
  std::unique_lock<std::mutex> lock(mu_);
  if (released_.load()) {
    return Status::Aborted("rank " + std::to_string(options_.rank) +
                           ": the communicator's device work was released by an abort");
  }
  Item item;
  const size_t ring = std::min(op.steps.size(), kPipelineSlots);
  for (size_t i = 0; i < ring; ++i) {
    auto slot = TakeSlot(op.staging_bytes);
    if (!slot.ok()) {
      // Slots taken so far go back unused (nothing was enqueued on them).
      for (auto& taken : item.slots) free_slots_.push_back(std::move(taken));
      return slot.status().WithContext("rank " + std::to_string(options_.rank) + ": staging " +
                                       std::to_string(op.staging_bytes) + " bytes for " + op.what);
    }
    item.slots.push_back(std::move(slot).value());
  }
  item.first = enqueued_ + 1;
  enqueued_ += static_cast<uint32_t>(op.steps.size());
  Status enqueued = EnqueueOnStreams(op, item.slots, item.first, native);
  item.op = std::move(op);
  // Queued even when the enqueue failed half way: the stream may already wait for done = k, and
  // only the progress thread, in order, stores it.
  item.enqueue_failed = !enqueued.ok();
  const std::string what = item.op.what;
  queue_.push_back(std::move(item));
  outstanding_.fetch_add(1, std::memory_order_acq_rel);
  work_.notify_one();
  lock.unlock();
  if (!enqueued.ok()) {
    enqueued = enqueued.WithContext("rank " + std::to_string(options_.rank) + ": enqueuing " + what);
    options_.fail(enqueued);
  }
  return enqueued;
}

void DeviceWorkQueue::AdvanceDone(uint32_t number) {
  uint32_t seen = LoadFlag(done_);
  while (!Reached(seen, number) &&
         !__atomic_compare_exchange_n(done_, &seen, number, false, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
  }
}

void DeviceWorkQueue::ReleaseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  released_.store(true);
  AdvanceDone(enqueued_);
}

Status DeviceWorkQueue::AwaitReady(uint32_t number, const std::string& what) {
  const Deadline deadline = Deadline::AfterMs(options_.timeout_ms);
  // Spin briefly (the copy out is usually done), then yield, then nap: a host poll of pinned
  // memory, never a device kernel.
  for (int i = 0; !Reached(LoadFlag(ready_), number); ++i) {
    if (released_.load(std::memory_order_relaxed)) {
      return Status::Aborted("rank " + std::to_string(options_.rank) + ": " + what + " released by an abort");
    }
    if (i < 64) continue;
    if (i < 128) {
      std::this_thread::yield();
      continue;
    }
    if (deadline.Expired()) {
      return Status::Timeout("rank " + std::to_string(options_.rank) + ": " + what + " on device buffers: its " +
                             "inputs were not staged within " + std::to_string(options_.timeout_ms) +
                             " ms (the application's stream did not reach the operation)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(i < 2000 ? 10 : 200));
  }
  return Status::Ok();
}

void DeviceWorkQueue::RunSteps(Item& item) {
  const size_t steps = item.op.steps.size();
  const uint32_t last = item.first + static_cast<uint32_t>(steps - 1);
  if (item.enqueue_failed) {
    AdvanceDone(last);
    return;
  }
  for (size_t j = 0; j < steps; ++j) {
    const uint32_t number = item.first + static_cast<uint32_t>(j);
    const std::string what =
        steps == 1 ? item.op.what
                   : item.op.what + " (step " + std::to_string(j + 1) + " of " + std::to_string(steps) + ")";
    Status status = AwaitReady(number, what);
    if (status.ok()) {
      const auto& memory = item.slots[j % item.slots.size()]->memory;
      status = item.op.steps[j].run_on_host(memory ? static_cast<char*>(memory->data()) : nullptr);
    }
    if (!status.ok()) {
      // The host part has broken the communicator already where it failed in flight; anything
      // else (a wait that timed out, an error found before sending) is made its error here, so
      // braidCommGetAsyncError reports it: nobody else is there to hear it. The later steps
      // would only fail the same way: the stream is released past all of them at once.
      options_.fail(status);
      AdvanceDone(last);
      return;
    }
    AdvanceDone(number);
  }
}

void DeviceWorkQueue::Run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    RunSteps(item);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& slot : item.slots) retiring_.push_back(std::move(slot));
      outstanding_.fetch_sub(1, std::memory_order_acq_rel);
      idle_.notify_all();
    }
  }
}

uint32_t DeviceWorkQueue::StagedThrough() const { return LoadFlag(ready_); }

Status DeviceWorkQueue::WaitIdle(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (idle_.wait_until(lock, deadline.when(), [&] { return outstanding_.load() == 0; })) return Status::Ok();
  return Status::Timeout("rank " + std::to_string(options_.rank) + ": " + std::to_string(outstanding_.load()) +
                         " device-buffer operation(s) still queued at the deadline");
}

}  // namespace braid::device_path
