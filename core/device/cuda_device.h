// The device seam (device.h) over CUDA: the runtime for streams, events, memory, copies and IPC;
// the driver's cuStreamWaitValue32 / cuStreamWriteValue32, reached through the runtime's
// cudaGetDriverEntryPointByVersion so that binaries link only the static runtime (the driver,
// libcuda.so, is opened at run time); kernels/cuda for reductions. Runs on the GPU machine only
// (tests/gpu/device_gpu_test); in CI it is built, not run.
#pragma once

#include <memory>

#include "core/base/status.h"
#include "core/device/device.h"

namespace braid::device {

// The device with this ordinal. No CUDA device, a bad ordinal or a driver without stream memory
// operations is an error saying which (kInvalidUsage), never a crash.
Result<std::unique_ptr<Device>> OpenCudaDevice(int ordinal);

}  // namespace braid::device
