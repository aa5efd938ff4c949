// A rank's GPU for the *_perf programs' device mode (--device cuda): device buffers, one stream
// the collectives are queued on, events that time what runs there, and the device-to-device
// copy rate the memory bound is computed from.
//
// Why a seam: the bench is written against braid.h plus whatever gives it device memory. Where
// the bench was built without a CUDA toolkit, perf_device_none.cc says so; perf_device_cuda.cc
// is the CUDA runtime (static, so the binaries run on the GPU machine with only a driver).
// Timing follows nccl-tests: events recorded on the stream around the iterations, so the time
// is the GPU's, from the first collective's start to the last one's end.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "bindings/c/braid.h"

namespace braid::bench {

enum class DeviceStatus {
  kReady,
  kNoDevice,  // the bench has CUDA, the machine has no usable GPU
  kNotBuilt,  // this build of the bench has no CUDA
  kFailed,    // a CUDA call failed (the message says which)
};

class BenchDevice {
 public:
  virtual ~BenchDevice() = default;
  // The CUDA ordinal, and "[0000:00:06] NVIDIA H100 80GB HBM3" for the device lines.
  virtual int ordinal() const = 0;
  virtual std::string Description() const = 0;
  // Tells GPUs apart across ranks and hosts (the device's UUID, in hex).
  virtual std::string Uuid() const = 0;
  // The stream every collective is queued on (a cudaStream_t).
  virtual braidStream_t stream() const = 0;

  // Device memory (zeroed); nullptr with *error on failure. Free(nullptr) is a no-op.
  virtual void* Allocate(size_t bytes, std::string* error) = 0;
  virtual void Free(void* device) = 0;
  // Synchronous copies (they wait for the stream first).
  virtual bool CopyIn(void* device, const void* host, size_t bytes, std::string* error) = 0;
  virtual bool CopyOut(void* host, const void* device, size_t bytes, std::string* error) = 0;
  // Waits (host) until everything queued on the stream has run.
  virtual bool Synchronize(std::string* error) = 0;
  // StartTimer records the start event on the stream; StopTimer records the stop event, waits
  // for it and gives the seconds between the two.
  virtual bool StartTimer(std::string* error) = 0;
  virtual bool StopTimer(double* seconds, std::string* error) = 0;
  // The device-to-device copy rate of cudaMemcpyAsync on the stream, in bytes moved (read +
  // written) per second: the best of `reps` copies of `bytes` bytes, timed with events.
  virtual bool MeasureCopyRate(size_t bytes, int reps, double* bytes_per_second,
                               std::string* error) = 0;
};

// The GPU of a rank: NCCL_TESTS_DEVICE (nccl-tests' variable) if set, else the launcher's
// LOCAL_RANK modulo the number of GPUs, else 0. On anything but kReady returns nullptr and
// *why says what is missing.
std::unique_ptr<BenchDevice> OpenBenchDevice(DeviceStatus* status, std::string* why);

}  // namespace braid::bench
