// Where one operation's tensors live, and the CUDA streams and events around its braid call.
//
// A CUDA operation follows ProcessGroupNCCL's semantics, written only against c10's
// device-generic interfaces (c10::Stream, c10::Event, VirtualGuardImpl), so the extension needs
// no CUDA headers or libraries at build time and loads where torch has no GPU:
//   1. on the calling thread: an event recorded on the caller's current stream, and the group's
//      own stream for that device (one from torch's pool per process group and device) waits
//      for it, so the operation sees everything the caller queued before it;
//   2. every input and output storage is recorded on the group's stream (the caching allocator
//      then reuses its memory only after the work queued there), and the job holds the tensors
//      until its braid call has been queued;
//   3. the job (on the group's worker, in issue order, or inline) runs with the group's stream
//      current, so its staging copies land on it too, and hands that stream to braid.h, which
//      queues the collective after them and makes the stream wait for its result;
//   4. an event recorded on the group's stream after the braid call is what Work.wait() makes
//      the caller's current stream wait for (a stream wait, not a host block), and the future
//      completes with the outputs under that stream (torch's CUDA-aware futures then order
//      their callbacks after it).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "bindings/c/braid.h"

namespace braid_torch {

// The one device all of a call's tensors are on: the CPU or one CUDA device. Tensors on two
// devices (a CPU input and a CUDA output, cuda:0 and cuda:1) are refused naming the first
// tensor of each; so is any other device type.
class CallDevice {
 public:
  explicit CallDevice(std::string op) : op_(std::move(op)) {}
  CallDevice& Add(const at::Tensor& tensor, const std::string& what);
  CallDevice& Add(const std::vector<at::Tensor>& tensors, const std::string& what);
  // The CPU when no tensor was added.
  c10::Device device() const { return device_.value_or(c10::Device(c10::kCPU)); }

 private:
  std::string op_;
  std::optional<c10::Device> device_;
  std::string first_;  // the tensor that decided device_
};

// The group's own stream per CUDA device (made on first use). Thread-safe.
class GroupStreams {
 public:
  // The group's stream on `device` (a CUDA device).
  c10::Stream For(c10::Device device);
  // Step 1 and 2 above: the group's stream on `device` waits for the caller's current stream,
  // and every storage of `tensors` is recorded on it. Returns the group's stream.
  c10::Stream Join(c10::Device device, const std::vector<at::Tensor>& tensors);

 private:
  std::mutex mutex_;  // guards streams_ only
  std::map<c10::DeviceIndex, c10::Stream> streams_;
};

// braid.h's stream argument for `stream`: the cudaStream_t behind it.
inline braidStream_t BraidStream(const c10::Stream& stream) {
  return static_cast<braidStream_t>(stream.native_handle());
}

}  // namespace braid_torch
