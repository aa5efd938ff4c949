// What every GPU test binary shares: finding the device (or saying clearly that there is none),
// counting checks, and one summary line that tests/gpu/run_on_device.sh reads.
//
// Why not Catch2's runner: these binaries are built here and run on the GPU machine, where a
// missing device must read as "skipped" (exit 77, as automake's test drivers use), never as
// passed, and run_on_device.sh turns the line "NAME: N checks, M failed" into JSON.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace braid::gpu_test {

constexpr int kExitSkipped = 77;

// Returns true if a CUDA device is usable; otherwise prints why on stdout and returns false.
inline bool HaveDevice(const char* test_name) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("%s: SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n", test_name,
                err == cudaSuccess ? "ok" : cudaGetErrorName(err), count);
    return false;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::printf("%s: device 0: %s, sm_%d%d, driver %d, runtime %d\n", test_name, prop.name, prop.major,
                prop.minor, driver, runtime);
  }
  return true;
}

class Checks {
 public:
  explicit Checks(const char* test_name) : name_(test_name) {}

  // Counts one check; prints the first 20 failures with their context.
  bool Expect(bool ok, const std::string& what) {
    ++checks_;
    if (!ok) {
      if (++failed_ <= 20) std::printf("%s: FAILED: %s\n", name_, what.c_str());
    }
    return ok;
  }

  // Prints "NAME: N checks, M failed" and returns the process exit code.
  int Finish() const {
    std::printf("%s: %d checks, %d failed\n", name_, checks_, failed_);
    return (failed_ == 0 && checks_ > 0) ? 0 : 1;
  }

 private:
  const char* name_;
  int checks_ = 0;
  int failed_ = 0;
};

}  // namespace braid::gpu_test
