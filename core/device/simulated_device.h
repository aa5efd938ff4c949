// A CPU SIMULATION of the device seam (device.h), for CI machines without a GPU.
//
// What it models: streams are worker threads that run their work in enqueue order; events are
// counters (recorded / completed); WriteValue32 and WaitValue32 are atomic stores and polled
// atomic loads on ordinary host memory, which may be shared between processes (a MAP_SHARED
// segment), so ranks in different processes order each other's streams as GPU streams would;
// Allocate returns memfd-backed memory that another process imports through /proc/<pid>/fd;
// kernels are kernels/cpu's ReduceInto and DivideInPlace.
// What it does not model: GPU timing, memory spaces (device and host pointers are the same
// memory), kernel faults, CUDA's error codes. A test that passes on it says the machinery above
// the seam is right, not that CUDA behaves so: tests/gpu runs the same checks on the GPU.
#pragma once

#include <memory>

#include "core/device/device.h"

namespace braid::device {

// Classify: memory from Allocate or Import is kDevice (the simulation keeps their ranges), any
// other non-null pointer kHost. WrapStream takes a simulated stream's native() handle (null: a
// per-process default stream standing for CUDA's legacy default stream).
std::unique_ptr<Device> NewSimulatedDevice();

// The simulation's stand-in for cudaStreamBeginCapture / cudaStreamEndCapture, for tests of
// braid's refusal to be captured: while `capturing`, IsCapturing(stream.native()) is true. It
// changes nothing else (work enqueued still runs).
Status SimulateCapture(Stream& stream, bool capturing);

}  // namespace braid::device
