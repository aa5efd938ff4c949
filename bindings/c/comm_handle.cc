#include "bindings/c/comm_handle.h"

#include <atomic>
#include <cstdint>
#include <unordered_set>

namespace braid::capi {
namespace {

struct Registry {
  std::mutex mutex;  // guards live
  std::unordered_set<const braidComm*> live;
  // Bumped (under mutex) by every removal from `live`: a thread's cached "this handle is live"
  // holds only while no handle was destroyed since (see IsLive).
  std::atomic<uint64_t> removals{0};
};

Registry& Live() {
  static Registry* registry = new Registry();  // outlives static destruction at exit
  return *registry;
}

thread_local std::string thread_last_error;

// The handle this thread last found live, and the registry's removal count at that moment.
thread_local const braidComm* cached_live = nullptr;
thread_local uint64_t cached_removals = 0;

// Why the per-thread cache: every entry point checks its handle, and taking the registry's mutex
// for a set lookup was ~2% of an 8-byte allreduce. A handle stays live until some handle is
// removed (creating others cannot make it dead), so the answer for the handle this thread used last
// stays true for as long as the removal count is unchanged. A destroy bumps the count after
// erasing, so a check that starts after braidCommDestroy returned always goes to the set. (A check
// racing a destroy of the same handle on another thread is the caller's bug either way: the lookup
// under the mutex could not make that safe either.)
bool IsLive(const braidComm* comm) {
  Registry& registry = Live();
  if (comm == cached_live && cached_removals == registry.removals.load(std::memory_order_acquire)) {
    return true;
  }
  std::lock_guard<std::mutex> lock(registry.mutex);
  const bool live = registry.live.count(comm) != 0;
  if (live) {
    cached_live = comm;
    cached_removals = registry.removals.load(std::memory_order_relaxed);
  }
  return live;
}

}  // namespace

void RegisterComm(braidComm* comm) {
  Registry& registry = Live();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.live.insert(comm);
}

bool UnregisterComm(braidComm* comm) {
  Registry& registry = Live();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const bool erased = registry.live.erase(comm) != 0;
  if (erased) registry.removals.fetch_add(1, std::memory_order_release);
  return erased;
}

Status CheckComm(const braidComm* comm) {
  if (comm == nullptr) return Status::InvalidArgument("comm is NULL");
  if (!IsLive(comm)) {
    return Status::InvalidUsage("comm does not refer to a live communicator (destroyed, or never "
                                "initialized)");
  }
  return Status::Ok();
}

braidResult_t Report(braidComm* comm, const Status& status) {
  if (!status.ok()) {
    thread_last_error = status.message();
    if (comm != nullptr && IsLive(comm)) {
      std::lock_guard<std::mutex> lock(comm->last_error_mutex);
      comm->last_error = status.message();
    }
  }
  return static_cast<braidResult_t>(status.code());
}

const char* ThreadLastError() { return thread_last_error.c_str(); }

const char* CommLastError(braidComm* comm) {
  if (comm == nullptr || !IsLive(comm)) return ThreadLastError();
  std::lock_guard<std::mutex> lock(comm->last_error_mutex);
  return comm->last_error.c_str();
}

}  // namespace braid::capi
