// The CUDA side of the device seam's descriptor-shared memory and user-buffer export
// (device.h: AllocateShareable, ExportFd, ImportFd, ExportContaining), kept apart from
// cuda_device.cc because it speaks the driver's virtual memory API (cuMemCreate, cuMemMap, ...)
// rather than the runtime. Every driver function is reached through
// cudaGetDriverEntryPointByVersion on first use, so binaries link only the static runtime, and a
// driver without them fails these calls with a message instead of failing OpenCudaDevice.
// For cuda_device.cc only.
#pragma once

#include <cstddef>
#include <memory>

#include "core/base/status.h"
#include "core/device/device.h"

namespace braid::device::cuda_shareable {

// cuMemCreate (pinned device memory on `ordinal`, POSIX descriptor handles) of `bytes` rounded
// up to the granularity, reserved, mapped and made readable and writable by the device.
Result<std::unique_ptr<Memory>> Allocate(int ordinal, size_t bytes);
// cuMemExportToShareableHandle of memory from Allocate: a new descriptor the caller owns.
Result<int> ExportFd(const Memory& memory);
// cuMemImportFromShareableHandle of a peer's descriptor, mapped here for `ordinal`.
Result<std::unique_ptr<Memory>> ImportFd(int ordinal, int fd, size_t bytes);
// The cudaMalloc allocation holding [ptr, ptr + bytes) (cuMemGetAddressRange) and the
// cudaIpcGetMemHandle of its base.
Result<Device::AllocationRange> ExportContaining(int ordinal, const void* ptr, size_t bytes);

}  // namespace braid::device::cuda_shareable
