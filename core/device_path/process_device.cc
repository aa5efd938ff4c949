#include "core/device_path/process_device.h"

#include <mutex>
#include <vector>

namespace braid::device_path {
namespace internal {
std::atomic<bool> device_possible{false};
}  // namespace internal

namespace {

// Lock order: a leaf.
std::mutex& DeviceMutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

struct State {
  DeviceOpener opener = nullptr;
  bool tried = false;  // the opener ran (its result is below)
  Status open_error;
  device::Device* device = nullptr;
  // Every device ever installed or opened: never destroyed, since streams and memory handed out
  // may outlive a replacement (and CUDA's must not be torn down in a static destructor).
  std::vector<std::unique_ptr<device::Device>> owned;
};

State& GetState() {
  static auto* state = new State();
  return *state;
}

}  // namespace

void RegisterDeviceOpener(DeviceOpener opener) {
  std::lock_guard<std::mutex> lock(DeviceMutex());
  GetState().opener = opener;
  internal::device_possible.store(true);
}

Result<device::Device*> ProcessDevice() {
  std::lock_guard<std::mutex> lock(DeviceMutex());
  State& state = GetState();
  if (state.device != nullptr) return state.device;
  if (state.opener == nullptr) {
    return Status::InvalidUsage("this process has no device: braid was built without CUDA "
                                "(link //bindings/c:braid_cuda for device buffers)");
  }
  if (!state.tried) {
    state.tried = true;
    auto opened = state.opener();
    if (opened.ok()) {
      state.owned.push_back(std::move(opened).value());
      state.device = state.owned.back().get();
    } else {
      state.open_error = opened.status();
    }
  }
  if (state.device != nullptr) return state.device;
  return state.open_error;
}

void InstallProcessDeviceForTesting(std::unique_ptr<device::Device> device) {
  std::lock_guard<std::mutex> lock(DeviceMutex());
  State& state = GetState();
  state.owned.push_back(std::move(device));
  state.device = state.owned.back().get();
  internal::device_possible.store(true);
}

}  // namespace braid::device_path
