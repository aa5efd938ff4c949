#include "transport/ibverbs/registration_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace braid::transport::ibverbs {

Result<std::shared_ptr<Region>> RegistrationCache::Find(const void* data, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  ++clock_;
  if (enabled_) {
    // Regions may overlap (a longer buffer on the same first page registers a longer region
    // under the same key, a buffer starting inside one registers its own), so the nearest few
    // starting at or below `begin` are looked at.
    auto it = by_begin_.upper_bound(begin);
    for (int looked = 0; looked < 4 && it != by_begin_.begin(); ++looked) {
      --it;
      if (it->second.region->end() >= end) {
        it->second.last_use = clock_;
        ++hits_;
        return it->second.region;
      }
    }
  }
  ++misses_;
  // Whole pages: neighbouring buffers on the same pages then share the region.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = begin & ~(page - 1);
  const uintptr_t last = (end + page - 1) & ~(page - 1);
  errno = 0;
  ibv_mr* mr = api_.reg_mr(pd_, reinterpret_cast<void*>(first), last - first, 0);
  if (mr == nullptr) {
    return Status::SystemError("registering " + std::to_string(bytes) +
                               " bytes for an RDMA write (ibv_reg_mr): " +
                               (errno != 0 ? std::strerror(errno) : "refused"));
  }
  auto region = std::make_shared<Region>(api_, mr);
  if (!enabled_) return region;
  if (by_begin_.size() >= kCapacity && by_begin_.count(first) == 0) {
    auto oldest = by_begin_.begin();
    for (auto e = by_begin_.begin(); e != by_begin_.end(); ++e) {
      if (e->second.last_use < oldest->second.last_use) oldest = e;
    }
    by_begin_.erase(oldest);  // writes still holding it keep it registered
  }
  by_begin_[first] = Entry{region, clock_};
  return region;
}

uint64_t RegistrationCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

uint64_t RegistrationCache::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

size_t RegistrationCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_begin_.size();
}

}  // namespace braid::transport::ibverbs
