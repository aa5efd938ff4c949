// Registers the CUDA device as this process's device (process_device.h): a binary that links
// this file (alwayslink) routes device pointers to the device path. The device opened is the
// calling thread's current CUDA device at the first device-buffer call.
#include <cuda_runtime_api.h>

#include "core/device/cuda_device.h"
#include "core/device_path/process_device.h"

namespace braid::device_path {
namespace {

Result<std::unique_ptr<device::Device>> OpenCurrentCudaDevice() {
  int ordinal = 0;
  if (cudaGetDevice(&ordinal) != cudaSuccess) {
    cudaGetLastError();
    ordinal = 0;  // OpenCudaDevice says why if there is none
  }
  return device::OpenCudaDevice(ordinal);
}

const bool registered = [] {
  RegisterDeviceOpener(&OpenCurrentCudaDevice);
  return true;
}();

}  // namespace
}  // namespace braid::device_path
