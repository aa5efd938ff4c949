#include "core/device_path/simulated_for_tests.h"

#include <mutex>

#include "core/device/simulated_device.h"
#include "core/device_path/process_device.h"

namespace braid::device_path {

device::Device* UseSimulatedDeviceForTesting() {
  static std::once_flag once;
  std::call_once(once, [] { InstallProcessDeviceForTesting(device::NewSimulatedDevice()); });
  return ProcessDevice().value();
}

}  // namespace braid::device_path
