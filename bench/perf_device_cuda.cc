// The device seam over the CUDA runtime (linked statically: the GPU machine has only a driver).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/perf_device.h"

namespace braid::bench {
namespace {

// True if `result` is cudaSuccess; otherwise *error names the call and CUDA's message.
bool Ok(cudaError_t result, const char* call, std::string* error) {
  if (result == cudaSuccess) return true;
  *error = std::string(call) + " failed: " + cudaGetErrorName(result) + ": " +
           cudaGetErrorString(result);
  return false;
}

class CudaBenchDevice : public BenchDevice {
 public:
  ~CudaBenchDevice() override {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  bool Open(int ordinal, std::string* error) {
    ordinal_ = ordinal;
    if (!Ok(cudaSetDevice(ordinal), "cudaSetDevice", error)) return false;
    cudaDeviceProp prop;
    if (!Ok(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties", error)) return false;
    char bus[32] = {0};
    std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID,
                  prop.pciDeviceID);
    description_ = std::string("[") + bus + "] " + prop.name;
    for (unsigned char c : prop.uuid.bytes) {
      char hex[3];
      std::snprintf(hex, sizeof(hex), "%02x", c);
      uuid_ += hex;
    }
    // A non-blocking stream, as nccl-tests uses: the legacy default stream would also order
    // the bench after unrelated work of the process.
    return Ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate",
              error) &&
           Ok(cudaEventCreate(&start_), "cudaEventCreate", error) &&
           Ok(cudaEventCreate(&stop_), "cudaEventCreate", error);
  }

  int ordinal() const override { return ordinal_; }
  std::string Description() const override { return description_; }
  std::string Uuid() const override { return uuid_; }
  braidStream_t stream() const override { return static_cast<braidStream_t>(stream_); }

  void* Allocate(size_t bytes, std::string* error) override {
    void* p = nullptr;
    if (!Ok(cudaMalloc(&p, bytes < 64 ? 64 : bytes), "cudaMalloc", error)) return nullptr;
    if (!Ok(cudaMemset(p, 0, bytes < 64 ? 64 : bytes), "cudaMemset", error)) {
      cudaFree(p);
      return nullptr;
    }
    return p;
  }
  void Free(void* device) override {
    if (device != nullptr) cudaFree(device);
  }

  bool CopyIn(void* device, const void* host, size_t bytes, std::string* error) override {
    return Synchronize(error) &&
           Ok(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (in)", error);
  }
  bool CopyOut(void* host, const void* device, size_t bytes, std::string* error) override {
    return Synchronize(error) &&
           Ok(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (out)", error);
  }
  bool Synchronize(std::string* error) override {
    return Ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", error);
  }

  bool StartTimer(std::string* error) override {
    return Ok(cudaEventRecord(start_, stream_), "cudaEventRecord (start)", error);
  }
  bool StopTimer(double* seconds, std::string* error) override {
    float ms = 0;
    if (!Ok(cudaEventRecord(stop_, stream_), "cudaEventRecord (stop)", error) ||
        !Ok(cudaEventSynchronize(stop_), "cudaEventSynchronize", error) ||
        !Ok(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime", error)) {
      return false;
    }
    *seconds = ms / 1e3;
    return true;
  }

  bool MeasureCopyRate(size_t bytes, int reps, double* bytes_per_second,
                       std::string* error) override {
    void* from = Allocate(bytes, error);
    if (from == nullptr) return false;
    void* to = Allocate(bytes, error);
    if (to == nullptr) {
      Free(from);
      return false;
    }
    double best = 0;
    bool ok = true;
    for (int r = 0; r <= reps && ok; ++r) {  // the first copy warms up, untimed
      double seconds = 0;
      ok = StartTimer(error) &&
           Ok(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream_),
              "cudaMemcpyAsync (device to device)", error) &&
           StopTimer(&seconds, error);
      if (ok && r > 0 && seconds > 0) {
        const double rate = 2.0 * static_cast<double>(bytes) / seconds;  // read + written
        if (rate > best) best = rate;
      }
    }
    Free(from);
    Free(to);
    *bytes_per_second = best;
    return ok;
  }

 private:
  int ordinal_ = 0;
  std::string description_;
  std::string uuid_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n >= 0) ? static_cast<int>(n) : fallback;
}

}  // namespace

std::unique_ptr<BenchDevice> OpenBenchDevice(DeviceStatus* status, std::string* why) {
  int count = 0;
  const cudaError_t probe = cudaGetDeviceCount(&count);
  if (probe != cudaSuccess || count == 0) {
    *status = DeviceStatus::kNoDevice;
    *why = probe != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorName(probe) +
                                      ": " + cudaGetErrorString(probe)
                                : std::string("cudaGetDeviceCount found 0 GPUs");
    return nullptr;
  }
  int ordinal = EnvInt("NCCL_TESTS_DEVICE", -1);
  if (ordinal < 0) ordinal = EnvInt("LOCAL_RANK", 0) % count;
  if (ordinal >= count) {
    *status = DeviceStatus::kFailed;
    *why = "NCCL_TESTS_DEVICE=" + std::to_string(ordinal) + " but this machine has " +
           std::to_string(count) + " GPU(s)";
    return nullptr;
  }
  auto device = std::make_unique<CudaBenchDevice>();
  if (!device->Open(ordinal, why)) {
    *status = DeviceStatus::kFailed;
    return nullptr;
  }
  *status = DeviceStatus::kReady;
  return device;
}

}  // namespace braid::bench
