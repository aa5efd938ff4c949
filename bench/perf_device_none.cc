// The device seam where the bench was built without a CUDA toolkit: --device cuda is refused.
#include "bench/perf_device.h"

namespace braid::bench {

std::unique_ptr<BenchDevice> OpenBenchDevice(DeviceStatus* status, std::string* why) {
  *status = DeviceStatus::kNotBuilt;
  *why = "this build of the bench has no CUDA (no toolkit was found when it was built; "
         "docs/CUDA.md says how Bazel finds one)";
  return nullptr;
}

}  // namespace braid::bench
