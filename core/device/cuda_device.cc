#include "core/device/cuda_device.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "core/device/cuda_shareable.h"
#include "kernels/cuda/reduce.h"

namespace braid::device {
namespace {

std::string CudaError(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
}

Status Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::SystemError(std::string("CUDA: ") + what + " failed: " + CudaError(err));
}

#define BRAID_CUDA_RETURN_IF_ERROR(call) BRAID_RETURN_IF_ERROR(Check((call), #call))

// The two driver functions the runtime has no form of.
using StreamValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
// cuMemGetAddressRange: the allocation a device pointer belongs to, for Classify's cache.
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
struct DriverOps {
  StreamValue32Fn wait_value32 = nullptr;
  StreamValue32Fn write_value32 = nullptr;
  AddressRangeFn address_range = nullptr;  // may be null: then nothing is cached
};

Status Driver(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return Status::Ok();
  return Status::SystemError(std::string("CUDA driver: ") + what + " failed with CUresult " + std::to_string(result));
}

class CudaEvent : public Event {
 public:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }
  Result<bool> Query() override {
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) return false;
    return Check(err, "cudaEventQuery");
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_;
};

class CudaStream : public Stream {
 public:
  // `owned`: made by NewStream (destroyed here); otherwise an application's (WrapStream).
  CudaStream(int ordinal, cudaStream_t stream, DriverOps driver, bool owned = true)
      : ordinal_(ordinal), stream_(stream), driver_(driver), owned_(owned) {}
  ~CudaStream() override {
    if (!owned_) return;
    cudaSetDevice(ordinal_);
    Synchronize(Deadline::AfterMs(1000)).ok();  // see Stream's destructor contract
    cudaStreamDestroy(stream_);
  }

  void* native() const override { return stream_; }

  Status Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    if (dst == nullptr || src == nullptr) return Status::InvalidArgument("CUDA stream copy: null pointer");
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    BRAID_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
    return Status::Ok();
  }

  Status Reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) override {
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    return kernels::cuda::LaunchReduce(type, op, out, a, b, count, stream_);
  }

  Status ReduceMany(DataType type, ReduceOp op, void* out, const void* const* inputs, int n,
                    size_t count) override {
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    return kernels::cuda::LaunchReduceMany(type, op, out, inputs, n, count, stream_);
  }

  Status Divide(DataType type, void* buf, size_t count, int divisor) override {
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    return kernels::cuda::LaunchDivide(type, buf, count, divisor, stream_);
  }

  Status Record(Event& event) override {
    auto* cuda = dynamic_cast<CudaEvent*>(&event);
    if (cuda == nullptr) return Status::InvalidArgument("CUDA stream: event of another device");
    BRAID_CUDA_RETURN_IF_ERROR(cudaEventRecord(cuda->get(), stream_));
    return Status::Ok();
  }

  Status Wait(Event& event) override {
    auto* cuda = dynamic_cast<CudaEvent*>(&event);
    if (cuda == nullptr) return Status::InvalidArgument("CUDA stream: event of another device");
    BRAID_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, cuda->get(), 0));
    return Status::Ok();
  }

  Status WriteValue32(uint32_t* flag, uint32_t value) override {
    BRAID_ASSIGN_OR_RETURN(CUdeviceptr address, DeviceAddress(flag, "write-value"));
    return Driver(driver_.write_value32(reinterpret_cast<CUstream>(stream_), address, value,
                                         CU_STREAM_WRITE_VALUE_DEFAULT),
                  "cuStreamWriteValue32");
  }

  Status WaitValue32(uint32_t* flag, uint32_t value) override {
    BRAID_ASSIGN_OR_RETURN(CUdeviceptr address, DeviceAddress(flag, "wait-value"));
    return Driver(driver_.wait_value32(reinterpret_cast<CUstream>(stream_), address, value, CU_STREAM_WAIT_VALUE_GEQ),
                  "cuStreamWaitValue32");
  }

  // Polls rather than cudaStreamSynchronize, which has no timeout.
  Status Synchronize(Deadline deadline) override {
    for (int i = 0;; ++i) {
      const cudaError_t err = cudaStreamQuery(stream_);
      if (err == cudaSuccess) return Status::Ok();
      if (err != cudaErrorNotReady) return Check(err, "cudaStreamQuery");
      if (deadline.Expired()) {
        return Status::Timeout("CUDA stream on device " + std::to_string(ordinal_) +
                               ": work still pending at the deadline (a stream waits on a flag nobody wrote, or a "
                               "kernel runs long)");
      }
      if (i > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  // The device address of a flag in pinned or registered host memory (or device memory).
  Result<CUdeviceptr> DeviceAddress(uint32_t* flag, const char* what) {
    if (flag == nullptr) return Status::InvalidArgument(std::string("CUDA stream ") + what + ": null flag");
    cudaPointerAttributes attributes;
    const cudaError_t err = cudaPointerGetAttributes(&attributes, flag);
    if (err != cudaSuccess || attributes.devicePointer == nullptr) {
      cudaGetLastError();  // clear it
      return Status::InvalidArgument(std::string("CUDA stream ") + what +
                                     ": the flag is not in memory from AllocateHost, RegisterHost or Allocate");
    }
    return reinterpret_cast<CUdeviceptr>(attributes.devicePointer);
  }

  int ordinal_;
  cudaStream_t stream_;
  DriverOps driver_;
  bool owned_;
};

class CudaMemory : public Memory {
 public:
  enum class Kind { kDevice, kHost, kRegistered, kImported };
  CudaMemory(int ordinal, Kind kind, void* data, size_t size) : ordinal_(ordinal), kind_(kind), data_(data), size_(size) {}
  ~CudaMemory() override {
    cudaSetDevice(ordinal_);
    switch (kind_) {
      case Kind::kDevice: cudaFree(data_); break;
      case Kind::kHost: cudaFreeHost(data_); break;
      case Kind::kRegistered: cudaHostUnregister(data_); break;
      case Kind::kImported: cudaIpcCloseMemHandle(data_); break;
    }
  }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  Kind kind() const { return kind_; }

 private:
  int ordinal_;
  Kind kind_;
  void* data_;
  size_t size_;
};

class CudaDevice : public Device {
 public:
  CudaDevice(int ordinal, std::string description, DriverOps driver)
      : ordinal_(ordinal), description_(std::move(description)), driver_(driver) {}

  std::string Describe() const override { return description_; }
  bool IsSimulation() const override { return false; }
  int Ordinal() const override { return ordinal_; }

  Result<std::unique_ptr<Stream>> NewStream() override {
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t stream = nullptr;
    BRAID_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return std::unique_ptr<Stream>(new CudaStream(ordinal_, stream, driver_));
  }

  Result<std::unique_ptr<Event>> NewEvent() override {
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaEvent_t event = nullptr;
    BRAID_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return std::unique_ptr<Event>(new CudaEvent(event));
  }

  Result<std::unique_ptr<Memory>> Allocate(size_t bytes) override {
    if (bytes == 0) return Status::InvalidArgument("CUDA device: allocating 0 bytes");
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    void* data = nullptr;
    BRAID_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes));
    return std::unique_ptr<Memory>(new CudaMemory(ordinal_, CudaMemory::Kind::kDevice, data, bytes));
  }

  Result<std::unique_ptr<Memory>> AllocateHost(size_t bytes) override {
    if (bytes == 0) return Status::InvalidArgument("CUDA device: allocating 0 host bytes");
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    void* data = nullptr;
    BRAID_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&data, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(data, 0, bytes);
    return std::unique_ptr<Memory>(new CudaMemory(ordinal_, CudaMemory::Kind::kHost, data, bytes));
  }

  Result<std::unique_ptr<Memory>> RegisterHost(void* ptr, size_t bytes) override {
    if (ptr == nullptr || bytes == 0) return Status::InvalidArgument("CUDA device: registering null or empty memory");
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    BRAID_CUDA_RETURN_IF_ERROR(cudaHostRegister(ptr, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    return std::unique_ptr<Memory>(new CudaMemory(ordinal_, CudaMemory::Kind::kRegistered, ptr, bytes));
  }

  // Descriptor-shared memory and user-buffer export: the driver's virtual memory API, in
  // cuda_shareable.cc.
  Result<std::unique_ptr<Memory>> AllocateShareable(size_t bytes) override {
    return cuda_shareable::Allocate(ordinal_, bytes);
  }
  Result<int> ExportFd(const Memory& memory) override { return cuda_shareable::ExportFd(memory); }
  Result<std::unique_ptr<Memory>> ImportFd(int fd, size_t bytes) override {
    return cuda_shareable::ImportFd(ordinal_, fd, bytes);
  }
  Result<AllocationRange> ExportContaining(const void* ptr, size_t bytes) override {
    return cuda_shareable::ExportContaining(ordinal_, ptr, bytes);
  }

  Result<IpcHandle> Export(const Memory& memory) override {
    const auto* cuda = dynamic_cast<const CudaMemory*>(&memory);
    if (cuda == nullptr || cuda->kind() != CudaMemory::Kind::kDevice) {
      return Status::InvalidArgument("CUDA device: only memory from Allocate can be exported");
    }
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaIpcMemHandle_t cuda_handle;
    BRAID_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&cuda_handle, memory.data()));
    static_assert(sizeof(cuda_handle) <= IpcHandle::kMaxBytes, "cudaIpcMemHandle_t fits an IpcHandle");
    IpcHandle handle;
    std::memcpy(handle.bytes, &cuda_handle, sizeof(cuda_handle));
    handle.size = memory.size();
    return handle;
  }

  Result<std::unique_ptr<Memory>> Import(const IpcHandle& handle) override {
    BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaIpcMemHandle_t cuda_handle;
    std::memcpy(&cuda_handle, handle.bytes, sizeof(cuda_handle));
    void* data = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&data, cuda_handle, cudaIpcMemLazyEnablePeerAccess);
    if (err == cudaErrorDeviceUninitialized) {  // "invalid device context": the exporting process
      cudaGetLastError();
      return Status::InvalidUsage("CUDA device: cudaIpcOpenMemHandle failed (" + CudaError(err) +
                                  "); importing in the process that exported the memory is not possible");
    }
    BRAID_RETURN_IF_ERROR(Check(err, "cudaIpcOpenMemHandle"));
    return std::unique_ptr<Memory>(new CudaMemory(ordinal_, CudaMemory::Kind::kImported, data, handle.size));
  }

  // Device allocations are cached by range (cuMemGetAddressRange), so a buffer used again costs
  // a map lookup. Host answers are not cached: host memory can be registered later, and the
  // lookup for it is one cudaPointerGetAttributes. A freed range may stay cached: with unified
  // addressing device addresses are never host addresses, so the answer stays right.
  Result<PointerKind> Classify(const void* ptr) override {
    if (ptr == nullptr) return PointerKind::kUnknown;
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    {
      std::lock_guard<std::mutex> lock(ranges_mutex_);
      auto it = device_ranges_.upper_bound(p);
      if (it != device_ranges_.begin() && p < std::prev(it)->first + std::prev(it)->second) {
        return PointerKind::kDevice;
      }
    }
    cudaPointerAttributes attributes;
    const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return PointerKind::kUnknown;
    }
    switch (attributes.type) {
      case cudaMemoryTypeDevice:
      case cudaMemoryTypeManaged: break;
      case cudaMemoryTypeHost:
      case cudaMemoryTypeUnregistered: return PointerKind::kHost;
      default: return PointerKind::kUnknown;
    }
    CUdeviceptr base = 0;
    size_t bytes = 0;
    if (driver_.address_range != nullptr &&
        driver_.address_range(&base, &bytes, reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS && bytes > 0) {
      std::lock_guard<std::mutex> lock(ranges_mutex_);
      device_ranges_[static_cast<uintptr_t>(base)] = bytes;
    }
    return PointerKind::kDevice;
  }

  Result<std::unique_ptr<Stream>> WrapStream(void* native) override {
    // NCCL's NULL stream is the legacy default stream, whatever the per-thread default is.
    cudaStream_t stream = native == nullptr ? cudaStreamLegacy : static_cast<cudaStream_t>(native);
    return std::unique_ptr<Stream>(new CudaStream(ordinal_, stream, driver_, /*owned=*/false));
  }

  Result<bool> IsCapturing(void* native) override {
    cudaStream_t stream = native == nullptr ? cudaStreamLegacy : static_cast<cudaStream_t>(native);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t err = cudaStreamIsCapturing(stream, &capture);
    if (err != cudaSuccess) {
      cudaGetLastError();
      // Asking about the legacy stream while another stream captures globally is itself an
      // error CUDA reports as such: a capture is under way.
      if (err == cudaErrorStreamCaptureImplicit) return true;
      return Check(err, "cudaStreamIsCapturing");
    }
    return capture != cudaStreamCaptureStatusNone;
  }

 private:
  std::mutex ranges_mutex_;  // guards device_ranges_; a leaf
  std::map<uintptr_t, size_t> device_ranges_;  // base -> bytes of device allocations seen
  int ordinal_;
  std::string description_;
  DriverOps driver_;
};

Result<StreamValue32Fn> DriverFunction(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  // 12000: the _v2 forms (CUDA 12's), which the 580 driver has.
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return Status::InvalidUsage(std::string("CUDA driver has no ") + name + " (" +
                                (err != cudaSuccess ? CudaError(err) : "symbol not found") +
                                "): stream memory operations are unavailable");
  }
  return reinterpret_cast<StreamValue32Fn>(fn);
}

}  // namespace

Result<std::unique_ptr<Device>> OpenCudaDevice(int ordinal) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::InvalidUsage("no CUDA device (cudaGetDeviceCount: " +
                                (err == cudaSuccess ? std::string("0 devices") : CudaError(err)) + ")");
  }
  if (ordinal < 0 || ordinal >= count) {
    return Status::InvalidUsage("CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                std::to_string(count) + " devices)");
  }
  BRAID_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaDeviceProp prop;
  BRAID_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  DriverOps driver;
  BRAID_ASSIGN_OR_RETURN(driver.wait_value32, DriverFunction("cuStreamWaitValue32"));
  BRAID_ASSIGN_OR_RETURN(driver.write_value32, DriverFunction("cuStreamWriteValue32"));
  // Optional: without it Classify asks CUDA every time.
  auto address_range = DriverFunction("cuMemGetAddressRange");
  if (address_range.ok()) driver.address_range = reinterpret_cast<AddressRangeFn>(address_range.value());
  const std::string description = "CUDA device " + std::to_string(ordinal) + " (" + prop.name + ", sm_" +
                                  std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  return std::unique_ptr<Device>(new CudaDevice(ordinal, description, driver));
}

}  // namespace braid::device
