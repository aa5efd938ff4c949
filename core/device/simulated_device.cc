#include "core/device/simulated_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/reduce.h"

namespace braid::device {
namespace {

uint32_t LoadFlag(const uint32_t* flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }
void StoreFlag(uint32_t* flag, uint32_t value) { __atomic_store_n(flag, value, __ATOMIC_RELEASE); }
// cuStreamWaitValue32's CU_STREAM_WAIT_VALUE_GEQ: cyclic, so a wrapping counter keeps working.
bool Reached(uint32_t current, uint32_t value) { return static_cast<int32_t>(current - value) >= 0; }

// Polls `ready` until it holds or `abandoned` does: spin, then yield, then nap up to 200 us.
// Polling, not a condition variable, because the writer may be another process.
template <typename Ready>
void PollUntil(Ready&& ready, const std::atomic<bool>& abandoned) {
  for (int i = 0; !ready(); ++i) {
    if (abandoned.load(std::memory_order_relaxed)) return;
    if (i < 64) continue;
    if (i < 128) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(i < 1000 ? 20 : 200));
    }
  }
}

// ReduceMany's semantics on the CPU: pairwise kernels/cpu reductions in input order, so the bits
// are a left fold of the inputs. When `out` is one of the later inputs the fold runs in a
// temporary first, since writing `out` early would change an input still to be read.
void FoldLeft(DataType type, ReduceOp op, void* out, const std::vector<const void*>& inputs, size_t count) {
  const size_t bytes = count * DataTypeSize(type);
  std::vector<uint8_t> temporary;
  void* acc = out;
  for (size_t k = 1; k < inputs.size(); ++k) {
    if (inputs[k] == out) {
      temporary.resize(bytes);
      acc = temporary.data();
    }
  }
  if (acc != inputs[0]) std::memmove(acc, inputs[0], bytes);
  for (size_t k = 1; k < inputs.size(); ++k) kernels::ReduceInto(type, op, acc, acc, inputs[k], count);
  if (acc != out) std::memcpy(out, acc, bytes);
}

class SimEvent : public Event {
 public:
  // As CUDA: whether the latest Record's work has completed.
  Result<bool> Query() override { return Completed(recorded_.load(std::memory_order_acquire)); }
  // The number of the Record being enqueued (1, 2, ...).
  uint64_t NextRecord() { return recorded_.fetch_add(1, std::memory_order_acq_rel) + 1; }
  uint64_t LatestRecord() const { return recorded_.load(std::memory_order_acquire); }
  // Records on different streams may complete out of order, and each counts for itself (a Wait
  // bound to record 6 on a blocked stream must not pass because record 7 on another stream
  // completed): completions below the watermark are all done, the others are kept until the
  // watermark reaches them.
  void Complete(uint64_t record) {
    std::lock_guard<std::mutex> lock(mu_);
    done_above_.insert(record);
    uint64_t watermark = watermark_.load(std::memory_order_relaxed);
    while (done_above_.count(watermark + 1) != 0) done_above_.erase(++watermark);
    watermark_.store(watermark, std::memory_order_release);
  }
  bool Completed(uint64_t record) const {
    if (record <= watermark_.load(std::memory_order_acquire)) return true;
    std::lock_guard<std::mutex> lock(mu_);
    return done_above_.count(record) != 0;
  }

 private:
  std::atomic<uint64_t> recorded_{0};
  std::atomic<uint64_t> watermark_{0};  // every record up to here has completed
  mutable std::mutex mu_;               // guards done_above_; a leaf
  std::set<uint64_t> done_above_;       // completed records above the watermark
};

class SimStream;

// The simulated streams alive in this process, so that a braidStream_t handed in by an
// application can be checked before it is used (a stale or foreign handle is an error, not a
// crash). Lock order: a leaf.
std::mutex live_streams_mutex;
std::set<const SimStream*>& LiveStreams() {
  static auto* live = new std::set<const SimStream*>();
  return *live;
}

class SimStream : public Stream {
 public:
  SimStream() : worker_([this] { Run(); }) {
    std::lock_guard<std::mutex> lock(live_streams_mutex);
    LiveStreams().insert(this);
  }

  ~SimStream() override {
    {
      std::lock_guard<std::mutex> lock(live_streams_mutex);
      LiveStreams().erase(this);
    }
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait_for(lock, std::chrono::seconds(1), [&] { return done_ == enqueued_; });
    stopping_ = true;
    abandoned_.store(true);  // releases a wait nobody will satisfy
    work_.notify_all();
    lock.unlock();
    worker_.join();
  }

  Status Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    if (dst == nullptr || src == nullptr) return Status::InvalidArgument("simulated stream copy: null pointer");
    Enqueue("copy of " + std::to_string(bytes) + " bytes", [=] { std::memcpy(dst, src, bytes); });
    return Status::Ok();
  }

  Status Reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) override {
    if (!IsValidDataType(static_cast<int>(type)) || !IsValidReduceOp(static_cast<int>(op))) {
      return Status::InvalidArgument("simulated stream reduce: invalid datatype or op");
    }
    if (count == 0) return Status::Ok();
    if (out == nullptr || a == nullptr || b == nullptr) {
      return Status::InvalidArgument("simulated stream reduce: null pointer");
    }
    Enqueue(std::string("reduce ") + ReduceOpName(op) + " of " + std::to_string(count) + " " + DataTypeName(type),
            [=] { kernels::ReduceInto(type, op, out, a, b, count); });
    return Status::Ok();
  }

  Status ReduceMany(DataType type, ReduceOp op, void* out, const void* const* inputs, int n,
                    size_t count) override {
    if (!IsValidDataType(static_cast<int>(type)) || !IsValidReduceOp(static_cast<int>(op))) {
      return Status::InvalidArgument("simulated stream reduce-many: invalid datatype or op");
    }
    if (n < 1 || n > kMaxReduceInputs) {
      return Status::InvalidArgument("simulated stream reduce-many: " + std::to_string(n) + " inputs (1 to " +
                                     std::to_string(kMaxReduceInputs) + ")");
    }
    if (count == 0) return Status::Ok();
    if (out == nullptr || inputs == nullptr) return Status::InvalidArgument("simulated stream reduce-many: null pointer");
    std::vector<const void*> in(inputs, inputs + n);  // the caller's list may not outlive the call
    for (const void* p : in) {
      if (p == nullptr) return Status::InvalidArgument("simulated stream reduce-many: null input");
    }
    Enqueue(std::string("reduce-many ") + ReduceOpName(op) + " of " + std::to_string(n) + " x " +
                std::to_string(count) + " " + DataTypeName(type),
            [=] { FoldLeft(type, op, out, in, count); });
    return Status::Ok();
  }

  Status Divide(DataType type, void* buf, size_t count, int divisor) override {
    if (!IsValidDataType(static_cast<int>(type)) || divisor < 1) {
      return Status::InvalidArgument("simulated stream divide: invalid datatype or divisor " + std::to_string(divisor));
    }
    if (count == 0) return Status::Ok();
    if (buf == nullptr) return Status::InvalidArgument("simulated stream divide: null buffer");
    Enqueue("divide by " + std::to_string(divisor), [=] { kernels::DivideInPlace(type, buf, count, divisor); });
    return Status::Ok();
  }

  Status Record(Event& event) override {
    auto* sim = dynamic_cast<SimEvent*>(&event);
    if (sim == nullptr) return Status::InvalidArgument("simulated stream: event of another device");
    const uint64_t record = sim->NextRecord();
    Enqueue("event record", [sim, record] { sim->Complete(record); });
    return Status::Ok();
  }

  Status Wait(Event& event) override {
    auto* sim = dynamic_cast<SimEvent*>(&event);
    if (sim == nullptr) return Status::InvalidArgument("simulated stream: event of another device");
    const uint64_t record = sim->LatestRecord();  // binds to the latest Record enqueued before now
    if (record == 0) return Status::Ok();
    Enqueue("wait for event record " + std::to_string(record),
            [this, sim, record] { PollUntil([&] { return sim->Completed(record); }, abandoned_); });
    return Status::Ok();
  }

  Status WriteValue32(uint32_t* flag, uint32_t value) override {
    if (flag == nullptr) return Status::InvalidArgument("simulated stream write-value: null flag");
    Enqueue("write flag " + std::to_string(value), [=] { StoreFlag(flag, value); });
    return Status::Ok();
  }

  Status WaitValue32(uint32_t* flag, uint32_t value) override {
    if (flag == nullptr) return Status::InvalidArgument("simulated stream wait-value: null flag");
    Enqueue("wait for flag >= " + std::to_string(value),
            [this, flag, value] { PollUntil([&] { return Reached(LoadFlag(flag), value); }, abandoned_); });
    return Status::Ok();
  }

  Status Synchronize(Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (idle_.wait_until(lock, deadline.when(), [&] { return done_ == enqueued_; })) return Status::Ok();
    return Status::Timeout("simulated stream: " + std::to_string(enqueued_ - done_) + " of " +
                           std::to_string(enqueued_) + " enqueued items still pending at the deadline; running: " +
                           running_);
  }

  // The application's handle is the stream object itself.
  void* native() const override { return const_cast<SimStream*>(this); }

  // SimulateCapture's model of cudaStreamBeginCapture / EndCapture.
  void SetCapturing(bool capturing) { capturing_.store(capturing); }
  bool capturing() const { return capturing_.load(); }

 private:
  struct Item {
    std::string what;
    std::function<void()> run;
  };

  void Enqueue(std::string what, std::function<void()> run) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(what), std::move(run)});
    ++enqueued_;
    work_.notify_one();
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      Item item = std::move(queue_.front());
      queue_.pop_front();
      running_ = item.what;
      lock.unlock();
      if (!abandoned_.load()) item.run();  // abandoned: drop what is left
      lock.lock();
      running_ = "nothing";
      ++done_;
      idle_.notify_all();
    }
  }

  // Lock order: mu_ is a leaf (no other lock is taken under it; work runs without it).
  std::mutex mu_;
  std::condition_variable work_;  // the worker waits for items
  std::condition_variable idle_;  // Synchronize and the destructor wait for done_ == enqueued_
  std::deque<Item> queue_;
  uint64_t enqueued_ = 0;
  uint64_t done_ = 0;
  std::string running_ = "nothing";
  bool stopping_ = false;
  std::atomic<bool> abandoned_{false};
  std::atomic<bool> capturing_{false};
  std::thread worker_;  // last: starts after the members above exist
};

// WrapStream's result: every call goes to the application's stream, which it does not own.
class BorrowedSimStream : public Stream {
 public:
  explicit BorrowedSimStream(SimStream* target) : target_(target) {}
  Status Copy(void* dst, const void* src, size_t bytes) override { return target_->Copy(dst, src, bytes); }
  Status Reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) override {
    return target_->Reduce(type, op, out, a, b, count);
  }
  Status ReduceMany(DataType type, ReduceOp op, void* out, const void* const* inputs, int n,
                    size_t count) override {
    return target_->ReduceMany(type, op, out, inputs, n, count);
  }
  Status Divide(DataType type, void* buf, size_t count, int divisor) override {
    return target_->Divide(type, buf, count, divisor);
  }
  Status Record(Event& event) override { return target_->Record(event); }
  Status Wait(Event& event) override { return target_->Wait(event); }
  Status WriteValue32(uint32_t* flag, uint32_t value) override { return target_->WriteValue32(flag, value); }
  Status WaitValue32(uint32_t* flag, uint32_t value) override { return target_->WaitValue32(flag, value); }
  Status Synchronize(Deadline deadline) override { return target_->Synchronize(deadline); }
  void* native() const override { return target_->native(); }

 private:
  SimStream* target_;
};

// Which [begin, end) ranges are "device" memory (Allocate's and Import's), for Classify. Shared
// with the memory objects, whose release removes their range. Lock order: a leaf.
class DeviceRanges {
 public:
  void Add(const void* begin, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_[reinterpret_cast<uintptr_t>(begin)] = bytes;
  }
  void Remove(const void* begin) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.erase(reinterpret_cast<uintptr_t>(begin));
  }
  bool Contains(const void* ptr) const {
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranges_.upper_bound(p);
    if (it == ranges_.begin()) return false;
    --it;
    return p < it->first + it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> ranges_;  // begin -> bytes
};

class PlainMemory : public Memory {
 public:
  PlainMemory(void* data, size_t size, std::function<void()> release)
      : data_(data), size_(size), release_(std::move(release)) {}
  ~PlainMemory() override {
    if (release_) release_();
  }
  PlainMemory(const PlainMemory&) = delete;
  PlainMemory& operator=(const PlainMemory&) = delete;
  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
  std::function<void()> release_;
};

// Every live memfd allocation of this process by address, as CUDA knows every cudaMalloc
// allocation: ExportContaining (braidCommRegister) finds the allocation holding a user's pointer
// here, with the descriptor a handle names. Never destroyed (memory may be freed at exit).
struct LiveAllocation {
  size_t size;
  int fd;
  bool shareable;  // from AllocateShareable (exported by descriptor), not Allocate
};
std::mutex live_allocations_mutex;  // a leaf
std::map<uintptr_t, LiveAllocation>& LiveAllocations() {
  static auto* live = new std::map<uintptr_t, LiveAllocation>();
  return *live;
}

// "Device" memory: a memfd mapping, so another process can import it.
class MemfdMemory : public PlainMemory {
 public:
  MemfdMemory(void* data, size_t size, int fd, bool shareable = false)
      : PlainMemory(data, size, [data, size, fd] {
          munmap(data, size);
          close(fd);
        }),
        fd_(fd),
        shareable_(shareable) {
    std::lock_guard<std::mutex> lock(live_allocations_mutex);
    LiveAllocations()[reinterpret_cast<uintptr_t>(data)] = LiveAllocation{size, fd, shareable};
  }
  ~MemfdMemory() override {
    std::lock_guard<std::mutex> lock(live_allocations_mutex);
    LiveAllocations().erase(reinterpret_cast<uintptr_t>(data()));
  }
  int fd() const { return fd_; }
  bool shareable() const { return shareable_; }

 private:
  int fd_;
  bool shareable_;
};

// What the simulation rounds shareable allocations to: CUDA's granularity is 2 MiB; a page is
// enough to make callers use size() rather than what they asked for.
constexpr size_t kShareableGranularity = 4096;

constexpr char kIpcMagic[8] = {'b', 'r', 'a', 'i', 'd', 's', 'i', 'm'};
struct SimIpcHandle {
  char magic[8];
  int32_t pid;
  int32_t fd;
};
static_assert(sizeof(SimIpcHandle) <= IpcHandle::kMaxBytes, "the simulated handle fits an IpcHandle");

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

class SimDevice : public Device {
 public:
  SimDevice() : ranges_(std::make_shared<DeviceRanges>()) {}

  std::string Describe() const override { return "simulated device (CPU threads; not a GPU)"; }
  bool IsSimulation() const override { return true; }
  int Ordinal() const override { return 0; }

  Result<std::unique_ptr<Stream>> NewStream() override { return std::unique_ptr<Stream>(new SimStream()); }
  Result<std::unique_ptr<Event>> NewEvent() override { return std::unique_ptr<Event>(new SimEvent()); }

  Result<std::unique_ptr<Memory>> Allocate(size_t bytes) override {
    if (bytes == 0) return Status::InvalidArgument("simulated device: allocating 0 bytes");
    const int fd = memfd_create("braid-simulated-device", MFD_CLOEXEC);
    if (fd < 0) return Status::SystemError(Errno("simulated device: memfd_create"));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const Status failed = Status::SystemError(Errno("simulated device: ftruncate"));
      close(fd);
      return failed;
    }
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const Status failed = Status::SystemError(Errno("simulated device: mmap"));
      close(fd);
      return failed;
    }
    ranges_->Add(data, bytes);
    auto memory = std::unique_ptr<Memory>(new MemfdMemory(data, bytes, fd));
    // Its range is forgotten before it is unmapped (TrackedMemory's destructor runs first).
    return Tracked(std::move(memory));
  }

  Result<std::unique_ptr<Memory>> AllocateHost(size_t bytes) override {
    if (bytes == 0) return Status::InvalidArgument("simulated device: allocating 0 host bytes");
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (data == nullptr) return Status::SystemError("simulated device: out of host memory");
    std::memset(data, 0, rounded);
    return std::unique_ptr<Memory>(new PlainMemory(data, bytes, [data] { std::free(data); }));
  }

  Result<std::unique_ptr<Memory>> RegisterHost(void* ptr, size_t bytes) override {
    if (ptr == nullptr || bytes == 0) return Status::InvalidArgument("simulated device: registering null or empty memory");
    return std::unique_ptr<Memory>(new PlainMemory(ptr, bytes, nullptr));
  }

  // Shareable memory is a memfd of its own; its descriptor is what passes over SCM_RIGHTS.
  Result<std::unique_ptr<Memory>> AllocateShareable(size_t bytes) override {
    if (bytes == 0) return Status::InvalidArgument("simulated device: allocating 0 shareable bytes");
    const size_t rounded = (bytes + kShareableGranularity - 1) / kShareableGranularity * kShareableGranularity;
    const int fd = memfd_create("braid-simulated-shareable", MFD_CLOEXEC);
    if (fd < 0) return Status::SystemError(Errno("simulated device: memfd_create"));
    if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
      const Status failed = Status::SystemError(Errno("simulated device: ftruncate"));
      close(fd);
      return failed;
    }
    void* data = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const Status failed = Status::SystemError(Errno("simulated device: mmap"));
      close(fd);
      return failed;
    }
    return std::unique_ptr<Memory>(new MemfdMemory(data, rounded, fd, /*shareable=*/true));
  }

  Result<int> ExportFd(const Memory& memory) override {
    int fd = -1;
    {
      std::lock_guard<std::mutex> lock(live_allocations_mutex);
      auto it = LiveAllocations().find(reinterpret_cast<uintptr_t>(memory.data()));
      if (it != LiveAllocations().end() && it->second.shareable && it->second.size == memory.size()) {
        fd = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) return Status::SystemError(Errno("simulated device: duplicating a shareable descriptor"));
      }
    }
    if (fd < 0) {
      return Status::InvalidArgument("simulated device: only memory from AllocateShareable can be exported as a "
                                     "descriptor");
    }
    return fd;
  }

  Result<std::unique_ptr<Memory>> ImportFd(int fd, size_t bytes) override {
    if (fd < 0 || bytes == 0) {
      return Status::InvalidArgument("simulated device: importing descriptor " + std::to_string(fd) + " of " +
                                     std::to_string(bytes) + " bytes");
    }
    struct stat st;
    if (fstat(fd, &st) != 0) return Status::InvalidArgument(Errno("simulated device: fstat of an imported descriptor"));
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes) {
      return Status::InvalidArgument("simulated device: the imported descriptor is not shareable memory of " +
                                     std::to_string(bytes) + " bytes (its size is " + std::to_string(st.st_size) +
                                     ")");
    }
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) return Status::SystemError(Errno("simulated device: mmap of an imported descriptor"));
    return std::unique_ptr<Memory>(new PlainMemory(data, bytes, [data, bytes] { munmap(data, bytes); }));
  }

  Result<AllocationRange> ExportContaining(const void* ptr, size_t bytes) override {
    if (ptr == nullptr || bytes == 0) {
      return Status::InvalidArgument("simulated device: a null or empty buffer has no allocation");
    }
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(live_allocations_mutex);
    auto it = LiveAllocations().upper_bound(address);
    if (it == LiveAllocations().begin() || address >= std::prev(it)->first + std::prev(it)->second.size ||
        std::prev(it)->second.shareable) {
      return Status::InvalidArgument("simulated device: the buffer is not in device memory from Allocate (the "
                                     "simulation's cudaMalloc)");
    }
    --it;
    const uint64_t offset = address - it->first;
    if (bytes > it->second.size - offset) {
      return Status::InvalidArgument("simulated device: " + std::to_string(bytes) + " bytes at offset " +
                                     std::to_string(offset) + " run past the end of their " +
                                     std::to_string(it->second.size) + "-byte allocation");
    }
    SimIpcHandle sim;
    std::memcpy(sim.magic, kIpcMagic, sizeof(kIpcMagic));
    sim.pid = static_cast<int32_t>(getpid());
    sim.fd = it->second.fd;
    AllocationRange range;
    std::memcpy(range.handle.bytes, &sim, sizeof(sim));
    range.handle.size = it->second.size;
    range.base = reinterpret_cast<const void*>(it->first);
    range.offset = offset;
    return range;
  }

  Result<IpcHandle> Export(const Memory& memory) override {
    const auto* tracked = dynamic_cast<const TrackedMemory*>(&memory);
    const auto* memfd = dynamic_cast<const MemfdMemory*>(tracked != nullptr ? &tracked->inner() : &memory);
    if (memfd == nullptr) return Status::InvalidArgument("simulated device: only memory from Allocate can be exported");
    SimIpcHandle sim;
    std::memcpy(sim.magic, kIpcMagic, sizeof(kIpcMagic));
    sim.pid = static_cast<int32_t>(getpid());
    sim.fd = memfd->fd();
    IpcHandle handle;
    std::memcpy(handle.bytes, &sim, sizeof(sim));
    handle.size = memory.size();
    return handle;
  }

  Result<std::unique_ptr<Memory>> Import(const IpcHandle& handle) override {
    SimIpcHandle sim;
    std::memcpy(&sim, handle.bytes, sizeof(sim));
    if (std::memcmp(sim.magic, kIpcMagic, sizeof(kIpcMagic)) != 0 || handle.size == 0) {
      return Status::InvalidArgument("simulated device: not a simulated device's IPC handle");
    }
    if (sim.pid == static_cast<int32_t>(getpid())) {
      return Status::InvalidUsage("simulated device: importing memory in the process that exported it (CUDA refuses "
                                  "this too; threads of one process share the pointer)");
    }
    const std::string path = "/proc/" + std::to_string(sim.pid) + "/fd/" + std::to_string(sim.fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return Status::RemoteError(Errno(("simulated device: opening the exporter's " + path).c_str()));
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < handle.size) {
      close(fd);
      return Status::RemoteError("simulated device: " + path + " is smaller than the handle says");
    }
    void* data = mmap(nullptr, handle.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (data == MAP_FAILED) return Status::SystemError(Errno("simulated device: mmap of an import"));
    const size_t size = handle.size;
    ranges_->Add(data, size);
    return Tracked(std::unique_ptr<Memory>(new PlainMemory(data, size, [data, size] { munmap(data, size); })));
  }

  Result<PointerKind> Classify(const void* ptr) override {
    if (ptr == nullptr) return PointerKind::kUnknown;
    return ranges_->Contains(ptr) ? PointerKind::kDevice : PointerKind::kHost;
  }

  Result<std::unique_ptr<Stream>> WrapStream(void* native) override {
    if (native == nullptr) return std::unique_ptr<Stream>(new BorrowedSimStream(LegacyDefaultStream()));
    BRAID_ASSIGN_OR_RETURN(SimStream* stream, Live(native));
    return std::unique_ptr<Stream>(new BorrowedSimStream(stream));
  }

  Result<bool> IsCapturing(void* native) override {
    if (native == nullptr) return false;  // the simulation never captures its default stream
    BRAID_ASSIGN_OR_RETURN(SimStream* stream, Live(native));
    return stream->capturing();
  }

 private:
  // Memory whose range leaves ranges_ when it is freed.
  class TrackedMemory : public Memory {
   public:
    TrackedMemory(std::unique_ptr<Memory> inner, std::shared_ptr<DeviceRanges> ranges)
        : inner_(std::move(inner)), ranges_(std::move(ranges)) {}
    ~TrackedMemory() override { ranges_->Remove(inner_->data()); }
    void* data() const override { return inner_->data(); }
    size_t size() const override { return inner_->size(); }
    const Memory& inner() const { return *inner_; }

   private:
    std::unique_ptr<Memory> inner_;
    std::shared_ptr<DeviceRanges> ranges_;
  };
  std::unique_ptr<Memory> Tracked(std::unique_ptr<Memory> memory) {
    return std::unique_ptr<Memory>(new TrackedMemory(std::move(memory), ranges_));
  }

  static Result<SimStream*> Live(void* native) {
    std::lock_guard<std::mutex> lock(live_streams_mutex);
    auto* stream = static_cast<SimStream*>(native);
    if (LiveStreams().count(stream) == 0) {
      return Status::InvalidArgument("stream is not a live simulated stream (destroyed, or not made by the "
                                     "simulated device)");
    }
    return stream;
  }

  // NCCL's NULL stream is CUDA's legacy default stream; the simulation's is one stream per
  // process, made on first use (a child forked after the parent made one gets its own: threads
  // do not survive fork). Never destroyed: work may still be queued on it at exit.
  SimStream* LegacyDefaultStream() {
    std::lock_guard<std::mutex> lock(default_mutex_);
    if (default_stream_ == nullptr || default_pid_ != getpid()) {
      default_stream_ = new SimStream();
      default_pid_ = getpid();
    }
    return default_stream_;
  }

  std::shared_ptr<DeviceRanges> ranges_;
  std::mutex default_mutex_;  // guards the two below; a leaf
  SimStream* default_stream_ = nullptr;
  pid_t default_pid_ = 0;
};

}  // namespace

std::unique_ptr<Device> NewSimulatedDevice() { return std::make_unique<SimDevice>(); }

Status SimulateCapture(Stream& stream, bool capturing) {
  auto* sim = dynamic_cast<SimStream*>(&stream);
  if (sim == nullptr) return Status::InvalidArgument("SimulateCapture: not a stream of the simulated device");
  sim->SetCapturing(capturing);
  return Status::Ok();
}

}  // namespace braid::device
