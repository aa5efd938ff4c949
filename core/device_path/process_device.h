// The device this process's device-buffer calls run on, found once per process.
//
// Why a process-wide device: braid.h receives bare pointers and a braidStream_t, and must tell a
// device buffer from a host one before it knows anything else; that takes a device to ask. Which
// device stands here is decided at link time, not by a runtime switch:
// - a binary that links //core/device_path:cuda_opener (//bindings/c:braid_cuda does) registers
//   the CUDA opener, and the process's current CUDA device is opened on first use;
// - a test installs the CPU SIMULATION with UseSimulatedDeviceForTesting()
//   (//core/device_path:simulated_for_tests, testonly), which replaces any opener;
// - otherwise there is no device, DevicePossible() is false, and every call takes the host path
//   exactly as before (braid.h's checks read one flag more).
#pragma once

#include <atomic>
#include <memory>

#include "core/base/status.h"
#include "core/device/device.h"

namespace braid::device_path {

using DeviceOpener = Result<std::unique_ptr<device::Device>> (*)();

namespace internal {
extern std::atomic<bool> device_possible;
}  // namespace internal

// Whether a device may exist in this process (an opener is registered or a device installed).
// One relaxed load: the host path's only cost.
inline bool DevicePossible() { return internal::device_possible.load(std::memory_order_relaxed); }

// Registers how to open the device (at static initialization; the last registration wins).
void RegisterDeviceOpener(DeviceOpener opener);

// The device, opened on the first call (thread-safe); later calls return the same one, or the
// same error (e.g. "no CUDA device") if opening failed. kInvalidUsage when nothing registered.
// The device lives until the process exits.
Result<device::Device*> ProcessDevice();

// For tests only (through //core/device_path:simulated_for_tests): makes `device` this process's
// device, replacing whatever was there. Call before any communicator uses a device; a device it
// replaces is kept alive (streams may still refer to it).
void InstallProcessDeviceForTesting(std::unique_ptr<device::Device> device);

}  // namespace braid::device_path
