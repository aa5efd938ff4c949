// braidCommRegister / braidCommDeregister (braid.h): a communicator's registered buffers
// (registrations.h), kept on the braidComm and made on first use.
#include <memory>
#include <mutex>

#include "bindings/c/braid.h"
#include "bindings/c/comm_handle.h"
#include "bindings/c/registrations.h"
#include "core/device_path/process_device.h"

namespace {

using braid::Result;
using braid::Status;
using braid::capi::Guarded;
using braid::capi::Registrations;

std::mutex registrations_mutex;  // guards braidComm::registrations; a leaf

std::shared_ptr<Registrations> RegistrationsOf(braidComm* comm, bool create) {
  std::lock_guard<std::mutex> lock(registrations_mutex);
  if (comm->registrations == nullptr && create) comm->registrations = std::make_shared<Registrations>();
  return comm->registrations;
}

// The device whose memory `buffer` may be: the process's device when one may exist and says the
// buffer is its memory; otherwise none (host memory: the registration records the range only).
Result<braid::device::Device*> DeviceFor(const void* buffer) {
  if (!braid::device_path::DevicePossible()) return static_cast<braid::device::Device*>(nullptr);
  BRAID_ASSIGN_OR_RETURN(braid::device::Device * device, braid::device_path::ProcessDevice());
  BRAID_ASSIGN_OR_RETURN(braid::device::PointerKind kind, device->Classify(buffer));
  if (kind != braid::device::PointerKind::kDevice) return static_cast<braid::device::Device*>(nullptr);
  return device;
}

}  // namespace

extern "C" {

braidResult_t braidCommRegister(const braidComm_t comm, void* buff, size_t size, void** handle) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    if (handle == nullptr) return Status::InvalidArgument("braidCommRegister: handle is NULL");
    *handle = nullptr;
    if (buff == nullptr) return Status::InvalidArgument("braidCommRegister: buff is NULL");
    if (size == 0) return Status::InvalidArgument("braidCommRegister: size is 0");
    BRAID_ASSIGN_OR_RETURN(braid::device::Device * device, DeviceFor(buff));
    BRAID_ASSIGN_OR_RETURN(void* made, RegistrationsOf(comm, /*create=*/true)->Register(device, buff, size));
    *handle = made;
    return Status::Ok();
  });
}

braidResult_t braidCommDeregister(const braidComm_t comm, void* handle) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    if (handle == nullptr) return Status::InvalidArgument("braidCommDeregister: handle is NULL");
    std::shared_ptr<Registrations> registrations = RegistrationsOf(comm, /*create=*/false);
    if (registrations == nullptr) {
      return Status::InvalidArgument("braidCommDeregister: the handle is not a live registration of this communicator "
                                     "(it has registered nothing)");
    }
    return registrations->Deregister(handle);
  });
}

}  // extern "C"
