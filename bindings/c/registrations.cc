#include "bindings/c/registrations.h"

#include <string>

namespace braid::capi {

Result<void*> Registrations::Register(device::Device* device, void* buffer, size_t bytes) {
  if (buffer == nullptr) return Status::InvalidArgument("braidCommRegister: buff is NULL");
  if (bytes == 0) return Status::InvalidArgument("braidCommRegister: size is 0");
  const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer);
  if (bytes > UINTPTR_MAX - begin) {
    return Status::InvalidArgument("braidCommRegister: size " + std::to_string(bytes) + " runs past the address space");
  }
  auto entry = std::make_unique<Entry>();
  entry->buffer = buffer;
  entry->bytes = bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  if (device != nullptr) {
    // A cached export whose allocation holds the whole range serves without asking the device.
    CachedExport* cached = nullptr;
    auto it = exports_by_base_.upper_bound(begin);
    if (it != exports_by_base_.begin()) {
      --it;
      if (begin - it->first < it->second.allocation_bytes && bytes <= it->second.allocation_bytes - (begin - it->first)) {
        cached = &it->second;
      }
    }
    if (cached == nullptr) {
      Result<device::Device::AllocationRange> range = device->ExportContaining(buffer, bytes);
      if (!range.ok()) return range.status().WithContext("braidCommRegister");
      ++export_calls_;
      const uintptr_t base = reinterpret_cast<uintptr_t>(range.value().base);
      CachedExport& fresh = exports_by_base_[base];
      fresh.range = range.value();
      fresh.allocation_bytes = range.value().handle.size;
      cached = &fresh;
    }
    ++cached->users;
    entry->exported = true;
    entry->handle = cached->range.handle;
    entry->base = cached->range.base;
    entry->offset = begin - reinterpret_cast<uintptr_t>(cached->range.base);
  }
  Entry* raw = entry.get();
  entries_[raw] = std::move(entry);
  return static_cast<void*>(raw);
}

Status Registrations::Deregister(void* handle) {
  if (handle == nullptr) return Status::InvalidArgument("braidCommDeregister: handle is NULL");
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(static_cast<const Entry*>(handle));
  if (it == entries_.end()) {
    return Status::InvalidArgument("braidCommDeregister: the handle is not a live registration of this communicator "
                                   "(deregistered already, or given by another communicator)");
  }
  if (it->second->exported) {
    auto cached = exports_by_base_.find(reinterpret_cast<uintptr_t>(it->second->base));
    if (cached != exports_by_base_.end() && --cached->second.users == 0) exports_by_base_.erase(cached);
  }
  entries_.erase(it);
  return Status::Ok();
}

Result<Registrations::Entry> Registrations::Lookup(void* handle) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(static_cast<const Entry*>(handle));
  if (it == entries_.end()) return Status::InvalidArgument("not a live registration of this communicator");
  return *it->second;
}

size_t Registrations::live() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

uint64_t Registrations::exports() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return export_calls_;
}

}  // namespace braid::capi
