// TEST ONLY: runs this process's device path on the CPU SIMULATION of the device seam
// (core/device/simulated_device.h), so CI exercises braid.h's device-buffer calls end to end
// without a GPU. Never linked into libbraid (the target is testonly).
#pragma once

#include "core/device/device.h"

namespace braid::device_path {

// Installs a simulated device as this process's device (process_device.h) and returns it; every
// later call returns the same one. Call it before forking rank processes: each child uses its
// copy (the simulation makes its threads per process).
device::Device* UseSimulatedDeviceForTesting();

}  // namespace braid::device_path
