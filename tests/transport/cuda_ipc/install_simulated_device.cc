// Linked (alwayslink) only into test binaries that run the cuda_ipc transport on the CPU
// SIMULATION of the device seam (core/device/simulated_device.h): before main, every cuda_ipc
// transport the binary creates without a device in its context gets a simulated device, so the
// registry's cuda_ipc factory makes a transport on machines without a GPU. A pass on it says the
// transport's machinery is right (set-up, descriptor passing, flags, ordering, failures), not
// that CUDA behaves so: tests/gpu/cuda_ipc_gpu_test runs the transport on the GPU.
#include "core/device/simulated_device.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"

namespace {

const bool kSimulatedDeviceInstalled = [] {
  braid::transport::cuda_ipc::CudaIpcTransport::SetDeviceForTesting(braid::device::NewSimulatedDevice());
  return true;
}();

}  // namespace
