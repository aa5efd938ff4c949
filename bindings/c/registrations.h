// The buffers one communicator registered with braidCommRegister (ncclCommRegister's
// counterpart), and the IPC handles exported for them.
//
// Why: a peer on the same host can read or write a registered buffer in place (zero copy)
// once it holds the IPC handle of the allocation the buffer lives in. cudaIpcGetMemHandle names a
// whole cudaMalloc allocation, so a registration records the allocation's handle and the
// buffer's offset in it; the export is cached per allocation, so registering many buffers of one
// allocation (a framework's caching allocator hands out slices of large blocks) calls
// cudaIpcGetMemHandle once. The cache entry lives while a registration uses it, so an allocation
// freed after its last deregistration and made again at the same address is exported afresh.
//
// A host-only communicator (no device in this process) still validates and records registrations:
// there is nothing to export, and the handle names the range only. Thread safety: all methods may
// be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "core/base/status.h"
#include "core/device/device.h"

namespace braid::capi {

class Registrations {
 public:
  // What a handle names.
  struct Entry {
    const void* buffer = nullptr;
    size_t bytes = 0;
    bool exported = false;   // false on a host-only communicator
    device::IpcHandle handle;  // of the allocation's base (exported only)
    const void* base = nullptr;
    uint64_t offset = 0;  // buffer - base
  };

  // Registers [buffer, buffer + bytes). `device` null: a host-only communicator. Errors:
  // kInvalidArgument for a null buffer, zero bytes, or (with a device) memory that is not a
  // device allocation of it or runs past one, saying which; the device's own errors.
  Result<void*> Register(device::Device* device, void* buffer, size_t bytes);
  // kInvalidArgument for null, a handle this communicator did not give, or one already
  // deregistered.
  Status Deregister(void* handle);

  // What `handle` names (kInvalidArgument as Deregister). For transports and tests.
  Result<Entry> Lookup(void* handle) const;
  // Live registrations, and the exports made so far (the cache's calls into the device).
  size_t live() const;
  uint64_t exports() const;

 private:
  struct CachedExport {
    device::Device::AllocationRange range;
    size_t allocation_bytes = 0;
    int users = 0;
  };
  mutable std::mutex mutex_;  // guards everything below; a leaf (the device is called under it)
  std::map<const Entry*, std::unique_ptr<Entry>> entries_;
  std::map<uintptr_t, CachedExport> exports_by_base_;
  uint64_t export_calls_ = 0;
};

}  // namespace braid::capi
