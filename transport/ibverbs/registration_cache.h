// RegistrationCache: memory regions for the buffers the verbs transport sends from, registered
// once and found again by address range.
//
// Why: ibv_reg_mr pins pages and programs the adapter's translation tables, which costs tens of
// microseconds to milliseconds per call, while collectives send from the same few buffers call
// after call. A send looks up the region covering [addr, addr + bytes) and registers the
// surrounding pages only on a miss.
//
// The cache holds at most kCapacity regions; a miss beyond that evicts the least recently used
// one. A region in use by a posted write stays registered until that write completes (callers
// hold the shared_ptr), however the cache evicts.
//
// Hazard (the same as every verbs registration cache): a region is keyed by virtual address, so
// if the application frees a buffer and the allocator hands the same addresses out backed by
// other pages, a real adapter would still read the old, pinned pages. Regions are registered for
// local read only and dropped with the transport; BRAID_IB_REG_CACHE=0 registers per message
// instead (docs/VERBS.md).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "core/base/status.h"
#include "transport/ibverbs/verbs_api.h"

namespace braid::transport::ibverbs {

// One registered range; deregistered when the last holder lets go.
class Region {
 public:
  Region(const VerbsApi& api, ibv_mr* mr) : api_(api), mr_(mr) {}
  ~Region() { api_.dereg_mr(mr_); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  uint32_t lkey() const { return mr_->lkey; }
  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(mr_->addr); }
  uintptr_t end() const { return begin() + mr_->length; }

 private:
  const VerbsApi& api_;
  ibv_mr* const mr_;
};

class RegistrationCache {
 public:
  static constexpr size_t kCapacity = 64;

  // `enabled` false: every Find registers afresh and keeps nothing (BRAID_IB_REG_CACHE=0).
  RegistrationCache(const VerbsApi& api, ibv_pd* pd, bool enabled)
      : api_(api), pd_(pd), enabled_(enabled) {}

  // The region covering [data, data + bytes), bytes > 0. Errors: kSystemError naming the range
  // and errno when the adapter refuses to register it.
  Result<std::shared_ptr<Region>> Find(const void* data, size_t bytes);

  // Lookups answered from the cache / by a new registration, for tests.
  uint64_t hits() const;
  uint64_t misses() const;
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<Region> region;
    uint64_t last_use = 0;
  };
  const VerbsApi& api_;
  ibv_pd* const pd_;
  const bool enabled_;
  mutable std::mutex mutex_;  // guards everything below; a leaf lock
  std::map<uintptr_t, Entry> by_begin_;
  uint64_t clock_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace braid::transport::ibverbs
