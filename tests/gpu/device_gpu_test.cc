// The device seam's contract (tests/core/device/device_conformance.h) on CUDA: the checks the CPU
// simulation passes in CI, run against CudaDevice on the GPU machine. Exit 0 passed, 1 failed,
// 77 no device.
#include <string>

#include "core/device/cuda_device.h"
#include "tests/core/device/device_conformance.h"
#include "tests/gpu/gpu_check.h"

int main() {
  using namespace braid;
  constexpr const char* kName = "device_gpu_test";
  if (!gpu_test::HaveDevice(kName)) return gpu_test::kExitSkipped;
  gpu_test::Checks checks(kName);
  auto device = device::OpenCudaDevice(0);
  if (!checks.Expect(device.ok(), "OpenCudaDevice(0): " + device.status().ToString())) return checks.Finish();
  checks.Expect(!(*device)->IsSimulation(), "the CUDA device calls itself a simulation");
  std::printf("%s: %s\n", kName, (*device)->Describe().c_str());
  for (const auto& [name, check] : device::conformance::AllChecks()) {
    const std::string failure = check(**device);
    checks.Expect(failure.empty(), std::string(name) + ": " + failure);
  }
  const auto missing = device::OpenCudaDevice(1000);
  checks.Expect(!missing.ok() && missing.status().code() == Code::kInvalidUsage,
                "OpenCudaDevice(1000): " + missing.status().ToString());
  return checks.Finish();
}
