#include "core/device/cuda_shareable.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

namespace braid::device::cuda_shareable {
namespace {

// The driver functions this file needs, resolved once.
struct VirtualMemoryOps {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&cuMemGetAddressRange) address_range = nullptr;
};

template <typename Fn>
Status Resolve(const char* name, Fn* fn) {
  void* found_fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  // 12000: the forms CUDA 12 defined (cuMemGetAddressRange_v2), which the 580 driver has.
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &found_fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || found_fn == nullptr) {
    cudaGetLastError();
    return Status::InvalidUsage(std::string("CUDA driver has no ") + name +
                                ": memory shared by descriptor is unavailable");
  }
  *fn = reinterpret_cast<Fn>(found_fn);
  return Status::Ok();
}

Result<const VirtualMemoryOps*> Ops() {
  static std::mutex mutex;
  static VirtualMemoryOps ops;
  static Status resolved = Status::Internal("not resolved yet");
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!tried) {
    tried = true;
    resolved = [&]() -> Status {
      BRAID_RETURN_IF_ERROR(Resolve("cuMemGetAllocationGranularity", &ops.granularity));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemCreate", &ops.create));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemRelease", &ops.release));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemAddressReserve", &ops.reserve));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemAddressFree", &ops.address_free));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemMap", &ops.map));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemUnmap", &ops.unmap));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemSetAccess", &ops.set_access));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemExportToShareableHandle", &ops.export_handle));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemImportFromShareableHandle", &ops.import_handle));
      BRAID_RETURN_IF_ERROR(Resolve("cuMemGetAddressRange", &ops.address_range));
      return Status::Ok();
    }();
  }
  if (!resolved.ok()) return resolved;
  return &ops;
}

Status Driver(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return Status::Ok();
  return Status::SystemError(std::string("CUDA driver: ") + what + " failed with CUresult " + std::to_string(result));
}

CUmemAllocationProp PropertiesFor(int ordinal) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// A mapping of an allocation (made here, or imported): unmapped, its address range freed and the
// handle released on destruction. `exportable` for Allocate's, which ExportFd accepts.
class MappedMemory : public Memory {
 public:
  MappedMemory(const VirtualMemoryOps* ops, CUmemGenericAllocationHandle handle, CUdeviceptr address, size_t size,
               bool exportable)
      : ops_(ops), handle_(handle), address_(address), size_(size), exportable_(exportable) {}
  ~MappedMemory() override {
    ops_->unmap(address_, size_);
    ops_->address_free(address_, size_);
    ops_->release(handle_);
  }
  MappedMemory(const MappedMemory&) = delete;
  MappedMemory& operator=(const MappedMemory&) = delete;
  void* data() const override { return reinterpret_cast<void*>(address_); }
  size_t size() const override { return size_; }
  CUmemGenericAllocationHandle handle() const { return handle_; }
  bool exportable() const { return exportable_; }

 private:
  const VirtualMemoryOps* ops_;
  CUmemGenericAllocationHandle handle_;
  CUdeviceptr address_;
  size_t size_;
  bool exportable_;
};

// Reserves an address range for `handle`, maps it and gives `ordinal` read and write access; on
// failure releases what it made and the handle.
Result<std::unique_ptr<Memory>> MapHandle(const VirtualMemoryOps* ops, int ordinal, CUmemGenericAllocationHandle handle,
                                          size_t size, size_t alignment, bool exportable) {
  CUdeviceptr address = 0;
  Status st = Driver(ops->reserve(&address, size, alignment, 0, 0), "cuMemAddressReserve");
  if (!st.ok()) {
    ops->release(handle);
    return st;
  }
  st = Driver(ops->map(address, size, 0, handle, 0), "cuMemMap");
  if (!st.ok()) {
    ops->address_free(address, size);
    ops->release(handle);
    return st;
  }
  CUmemAccessDesc access;
  std::memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  st = Driver(ops->set_access(address, size, &access, 1), "cuMemSetAccess");
  if (!st.ok()) {
    ops->unmap(address, size);
    ops->address_free(address, size);
    ops->release(handle);
    return st;
  }
  return std::unique_ptr<Memory>(new MappedMemory(ops, handle, address, size, exportable));
}

Result<size_t> Granularity(const VirtualMemoryOps* ops, int ordinal) {
  const CUmemAllocationProp prop = PropertiesFor(ordinal);
  size_t granularity = 0;
  BRAID_RETURN_IF_ERROR(Driver(ops->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                               "cuMemGetAllocationGranularity"));
  if (granularity == 0) granularity = size_t{2} << 20;
  return granularity;
}

}  // namespace

Result<std::unique_ptr<Memory>> Allocate(int ordinal, size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("CUDA device: allocating 0 shareable bytes");
  BRAID_ASSIGN_OR_RETURN(const VirtualMemoryOps* ops, Ops());
  if (cudaSetDevice(ordinal) != cudaSuccess) {
    cudaGetLastError();
    return Status::SystemError("CUDA device: cudaSetDevice(" + std::to_string(ordinal) + ") failed");
  }
  BRAID_ASSIGN_OR_RETURN(size_t granularity, Granularity(ops, ordinal));
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  const CUmemAllocationProp prop = PropertiesFor(ordinal);
  CUmemGenericAllocationHandle handle = 0;
  BRAID_RETURN_IF_ERROR(Driver(ops->create(&handle, size, &prop, 0), "cuMemCreate (POSIX descriptor handles)"));
  return MapHandle(ops, ordinal, handle, size, granularity, /*exportable=*/true);
}

Result<int> ExportFd(const Memory& memory) {
  const auto* mapped = dynamic_cast<const MappedMemory*>(&memory);
  if (mapped == nullptr || !mapped->exportable()) {
    return Status::InvalidArgument("CUDA device: only memory from AllocateShareable can be exported as a descriptor");
  }
  BRAID_ASSIGN_OR_RETURN(const VirtualMemoryOps* ops, Ops());
  int fd = -1;
  BRAID_RETURN_IF_ERROR(Driver(ops->export_handle(&fd, mapped->handle(), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                               "cuMemExportToShareableHandle"));
  return fd;
}

Result<std::unique_ptr<Memory>> ImportFd(int ordinal, int fd, size_t bytes) {
  if (fd < 0 || bytes == 0) {
    return Status::InvalidArgument("CUDA device: importing descriptor " + std::to_string(fd) + " of " +
                                   std::to_string(bytes) + " bytes");
  }
  BRAID_ASSIGN_OR_RETURN(const VirtualMemoryOps* ops, Ops());
  if (cudaSetDevice(ordinal) != cudaSuccess) {
    cudaGetLastError();
    return Status::SystemError("CUDA device: cudaSetDevice(" + std::to_string(ordinal) + ") failed");
  }
  BRAID_ASSIGN_OR_RETURN(size_t granularity, Granularity(ops, ordinal));
  if (bytes % granularity != 0) {
    return Status::InvalidArgument("CUDA device: an imported allocation of " + std::to_string(bytes) +
                                   " bytes is not a multiple of the granularity " + std::to_string(granularity));
  }
  CUmemGenericAllocationHandle handle = 0;
  const CUresult imported = ops->import_handle(
      &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (imported != CUDA_SUCCESS) {
    return Status::InvalidArgument("CUDA driver: cuMemImportFromShareableHandle of descriptor " + std::to_string(fd) +
                                   " failed with CUresult " + std::to_string(imported) +
                                   " (not a CUDA allocation's descriptor?)");
  }
  return MapHandle(ops, ordinal, handle, bytes, granularity, /*exportable=*/false);
}

Result<Device::AllocationRange> ExportContaining(int ordinal, const void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) return Status::InvalidArgument("CUDA device: a null or empty buffer has no allocation");
  BRAID_ASSIGN_OR_RETURN(const VirtualMemoryOps* ops, Ops());
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess || attributes.type != cudaMemoryTypeDevice) {
    cudaGetLastError();
    return Status::InvalidArgument("CUDA device: the buffer is not device memory from cudaMalloc");
  }
  if (attributes.device != ordinal) {
    return Status::InvalidArgument("CUDA device: the buffer is on device " + std::to_string(attributes.device) +
                                   ", the communicator's is " + std::to_string(ordinal));
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  BRAID_RETURN_IF_ERROR(
      Driver(ops->address_range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)), "cuMemGetAddressRange"));
  const uint64_t offset = reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(base);
  if (bytes > size - offset) {
    return Status::InvalidArgument("CUDA device: " + std::to_string(bytes) + " bytes at offset " +
                                   std::to_string(offset) + " run past the end of their " + std::to_string(size) +
                                   "-byte allocation");
  }
  cudaIpcMemHandle_t cuda_handle;
  const cudaError_t err = cudaIpcGetMemHandle(&cuda_handle, reinterpret_cast<void*>(base));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::InvalidArgument(std::string("CUDA device: cudaIpcGetMemHandle of the buffer's allocation failed: ") +
                                   cudaGetErrorName(err) + " (memory from cuMemCreate or a pool has no legacy handle)");
  }
  static_assert(sizeof(cuda_handle) <= IpcHandle::kMaxBytes, "cudaIpcMemHandle_t fits an IpcHandle");
  Device::AllocationRange range;
  std::memcpy(range.handle.bytes, &cuda_handle, sizeof(cuda_handle));
  range.handle.size = size;
  range.base = reinterpret_cast<const void*>(base);
  range.offset = offset;
  return range;
}

}  // namespace braid::device::cuda_shareable
