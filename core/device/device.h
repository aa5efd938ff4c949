// The device seam: everything braid's device path needs from a GPU, behind one small interface.
//
// Why a seam: the device path (per-communicator streams joined to the caller's by events, a
// progress thread that drives host transports and talks to streams through flags, staging
// buffers, abort, timeouts) is most of the CUDA work and must be tested on every change, but CI
// has no GPU. Two implementations stand behind this interface:
// - OpenCudaDevice (cuda_device.h): the CUDA runtime, driver entry points for the stream memory
//   operations, and kernels/cuda for reductions. Tested on the GPU machine only.
// - NewSimulatedDevice (simulated_device.h): a CPU SIMULATION of the same semantics (streams are
//   in-order worker threads, events are counters, memory operations are atomics on shared
//   memory, kernels are kernels/cpu). It lets CI exercise the machinery above the seam; it proves
//   nothing about CUDA itself and never replaces the GPU tests.
//
// Semantics every implementation keeps (tests/core/device/ checks the simulation's; the GPU
// binaries check CUDA's):
// - Stream methods enqueue and return without waiting for earlier work; a stream runs its work in
//   enqueue order, one item after the other. Different streams run independently, except where
//   one waits for an event or a flag. Only Synchronize blocks the calling thread.
// - An event completes when all work its stream had before the Record completes. Stream::Wait
//   binds to the latest Record enqueued before it (CUDA's rule), so an event can be re-recorded.
//   An event never recorded counts as complete.
// - WriteValue32 stores a 32-bit value after all earlier work of its stream is done and visible;
//   WaitValue32 holds the stream until (int32_t)(*flag - value) >= 0 (cuStreamWaitValue32's GEQ:
//   a counter that wraps keeps working). Flags live in memory from AllocateHost or RegisterHost;
//   the host reads and writes them with atomic loads and stores (__atomic builtins). A stream
//   waiting on a flag holds no compute resource: that is how ranks that share a GPU are ordered
//   without kernels that spin (shared/research/CUDA.md).
// - Nothing waits forever on the host: Synchronize takes a deadline and returns kTimeout naming
//   what is pending. A stream's own wait on a flag has no deadline (as on the GPU): the host
//   releases it by writing the flag, which is what abort does.
// - Bad arguments (null pointers with a non-zero size, invalid dtype or op, a flag outside
//   registered memory where the implementation can tell) are kInvalidArgument at enqueue time.
// Thread safety: a Device may be used from any thread. A Stream is enqueued to by one thread at a
// time (a communicator's operations are serialised already); Event::Query and Synchronize may run
// on another thread (the progress thread polls while the caller enqueues).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/base/datatype.h"
#include "core/base/deadline.h"
#include "core/base/status.h"

namespace braid::device {

// Memory the device's streams can reach: device memory (Allocate), pinned host memory
// (AllocateHost), host memory registered in place (RegisterHost) or a peer's export (Import).
// The destructor frees, unregisters or unmaps it; the caller makes sure no stream still uses it.
class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
};

// What one process hands another (through the store or a socket) so that it can map memory made
// by Device::Allocate. Opaque bytes, valid while the exporting Memory lives.
struct IpcHandle {
  static constexpr size_t kMaxBytes = 64;  // cudaIpcMemHandle_t's size
  uint8_t bytes[kMaxBytes] = {};
  uint64_t size = 0;  // bytes of memory it names
};

// What a pointer is, for routing a call: memory the host's code may touch (kHost), memory only
// the device's streams reach (kDevice: Allocate, cudaMalloc, managed memory), or neither known
// (kUnknown: the implementation cannot tell; callers refuse it with a message).
enum class PointerKind { kHost, kDevice, kUnknown };

class Event {
 public:
  virtual ~Event() = default;
  // Whether the work before the latest Record of this event has completed (true if never
  // recorded). Never blocks. An error is the device's (e.g. a failed kernel on that stream).
  virtual Result<bool> Query() = 0;
};

class Stream {
 public:
  // Destroying a stream first waits up to a second for its work; work that cannot finish (a
  // WaitValue32 nobody satisfies) is then abandoned by the simulation, and left to the GPU by
  // CUDA (its wait ends when the flag is written: abort writes every flag before destroying).
  virtual ~Stream() = default;

  // dst[0, bytes) = src[0, bytes); both reachable by the device, no overlap.
  virtual Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // out[i] = a[i] op b[i] (kAvg as kSum), as kernels/cpu/reduce.h; out may be exactly a or b.
  virtual Status Reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) = 0;
  // out[i] = inputs[0][i] op inputs[1][i] op ... op inputs[n-1][i], folded left in input order
  // (kAvg as kSum), for 1 <= n <= kMaxReduceInputs. Why a fold in one fixed order: the direct
  // path's ranks each reduce all ranks' chunks themselves, and must all get the same bits. out
  // may be exactly one of the inputs (each element is read from every input before it is written).
  static constexpr int kMaxReduceInputs = 8;  // kernels/cuda's LaunchReduceMany takes 8 a launch
  virtual Status ReduceMany(DataType type, ReduceOp op, void* out, const void* const* inputs, int n,
                            size_t count) = 0;
  // buf[i] /= divisor (kAvg's last step), divisor >= 1.
  virtual Status Divide(DataType type, void* buf, size_t count, int divisor) = 0;
  // Marks the event: it completes when everything enqueued here so far has.
  virtual Status Record(Event& event) = 0;
  // Later work on this stream waits until the event's latest Record (as of now) completes.
  virtual Status Wait(Event& event) = 0;
  // *flag = value once earlier work is done (and its writes are visible).
  virtual Status WriteValue32(uint32_t* flag, uint32_t value) = 0;
  // Later work waits until (int32_t)(*flag - value) >= 0.
  virtual Status WaitValue32(uint32_t* flag, uint32_t value) = 0;
  // Blocks until all enqueued work has completed, or the deadline (kTimeout, saying what is
  // still pending).
  virtual Status Synchronize(Deadline deadline) = 0;

  // The handle an application holds for this stream (a cudaStream_t on CUDA; the simulation's
  // own token), which it passes to braid.h as braidStream_t. Never null for a stream from
  // NewStream. Added for the device path (core/device_path); the default is for
  // implementations that have no such handle.
  virtual void* native() const { return nullptr; }
};

class Device {
 public:
  virtual ~Device() = default;

  // For logs and errors: "CUDA device 0 (NVIDIA H100 ..., sm_90)" or
  // "simulated device (CPU threads; not a GPU)".
  virtual std::string Describe() const = 0;
  virtual bool IsSimulation() const = 0;
  // The CUDA device ordinal this Device drives (braidCommCuDevice reports it); the simulation
  // says 0, as if it were the first GPU.
  virtual int Ordinal() const = 0;

  virtual Result<std::unique_ptr<Stream>> NewStream() = 0;
  virtual Result<std::unique_ptr<Event>> NewEvent() = 0;

  // Device memory (zero bytes is kInvalidArgument).
  virtual Result<std::unique_ptr<Memory>> Allocate(size_t bytes) = 0;
  // Pinned host memory the streams reach: staging buffers and flags.
  virtual Result<std::unique_ptr<Memory>> AllocateHost(size_t bytes) = 0;
  // Makes existing host memory (e.g. a shared-memory segment other ranks map too) reachable by
  // the streams, so flags in it order streams of different processes. The Memory unregisters it.
  virtual Result<std::unique_ptr<Memory>> RegisterHost(void* ptr, size_t bytes) = 0;

  // Exports memory from Allocate for another process; Import maps it there. Importing in the
  // process that exported it is kInvalidUsage (CUDA refuses it: threads of one process share
  // plain pointers instead).
  virtual Result<IpcHandle> Export(const Memory& memory) = 0;
  virtual Result<std::unique_ptr<Memory>> Import(const IpcHandle& handle) = 0;

  // --- Memory shared by file descriptor (transport/cuda_ipc's staging buffers) ---
  // Why descriptors and not IpcHandle: a descriptor passes over a Unix socket (SCM_RIGHTS) to a
  // peer that proved it belongs to the communicator, and the kernel frees what it names with the
  // last holder, however the processes end; CUDA's legacy handles are guessable bytes.
  //
  // Device memory another process can map through a descriptor: cuMemCreate with
  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, reserved, mapped and made accessible here (the
  // simulation: a memfd). size() is `bytes` rounded up to the allocation granularity (2 MiB on
  // CUDA); zero bytes is kInvalidArgument. The defaults say the implementation has none.
  virtual Result<std::unique_ptr<Memory>> AllocateShareable(size_t bytes) {
    (void)bytes;
    return Status::InvalidUsage(Describe() + " cannot allocate shareable memory");
  }
  // A new descriptor for memory from AllocateShareable (cuMemExportToShareableHandle), owned by
  // the caller, who closes it once sent. Other memory is kInvalidArgument.
  virtual Result<int> ExportFd(const Memory& memory) {
    (void)memory;
    return Status::InvalidUsage(Describe() + " cannot export memory as a descriptor");
  }
  // Maps the `bytes` (the exporter's size()) behind a peer's descriptor into this process, for
  // this device (cuMemImportFromShareableHandle, cuMemAddressReserve, cuMemMap, cuMemSetAccess).
  // Does not take `fd`: the caller closes it. The Memory unmaps; the allocation lives until its
  // last mapping and descriptor are gone. A descriptor of the wrong kind or size is
  // kInvalidArgument.
  virtual Result<std::unique_ptr<Memory>> ImportFd(int fd, size_t bytes) {
    (void)fd;
    (void)bytes;
    return Status::InvalidUsage(Describe() + " cannot import memory from a descriptor");
  }

  // --- A user's buffer (braidCommRegister) ---
  // The IPC handle of the whole allocation (cudaMalloc's; the simulation's Allocate) that holds
  // [ptr, ptr + bytes), and ptr's offset in it: a handle names a whole allocation, so a peer
  // opens the base and adds the offset. Memory that is not such an allocation, or a range that
  // runs past its end, is kInvalidArgument saying which.
  struct AllocationRange {
    IpcHandle handle;    // of the allocation's base; handle.size is the allocation's size
    const void* base = nullptr;
    uint64_t offset = 0;  // ptr - base
  };
  virtual Result<AllocationRange> ExportContaining(const void* ptr, size_t bytes) {
    (void)ptr;
    (void)bytes;
    return Status::InvalidUsage(Describe() + " cannot export a user's buffer");
  }

  // ---- for the device path (core/device_path); defaults for implementations without it ----

  // Whether `ptr` is host or device memory. Never blocks on streams; cheap after the first call
  // for an allocation (CUDA caches device allocation ranges; the simulation knows its own).
  // Errors only for a failing device; a pointer it cannot place is kUnknown.
  virtual Result<PointerKind> Classify(const void* ptr) {
    (void)ptr;
    return PointerKind::kUnknown;
  }
  // A Stream over the application's stream `native` (braidStream_t; null means the legacy
  // default stream, as in NCCL) that does not own it: destroying the wrapper leaves the
  // application's stream alone. A handle this device cannot have made is kInvalidArgument where
  // the implementation can tell.
  virtual Result<std::unique_ptr<Stream>> WrapStream(void* native) {
    (void)native;
    return Status::InvalidUsage(Describe() + " cannot wrap an application's stream");
  }
  // Whether the application's stream `native` (null: the legacy default stream) is being
  // captured into a graph (cudaStreamIsCapturing), so that a call can refuse it rather than be
  // recorded into a graph it would not replay correctly.
  virtual Result<bool> IsCapturing(void* native) {
    (void)native;
    return false;
  }
};

}  // namespace braid::device
