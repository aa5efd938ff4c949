#include "bindings/c/comm_handle.h"

#include <atomic>
#include <cstdint>
#include <unordered_set>

namespace braid::capi {

std::atomic<uint64_t> live_handle_removals{0};
__thread const braidComm* thread_cached_live = nullptr;
__thread uint64_t thread_cached_removals = 0;

namespace {

struct Registry {
  std::mutex mutex;  // guards live
  std::unordered_set<const braidComm*> live;
};

Registry& Live() {
  static Registry* registry = new Registry();  // outlives static destruction at exit
  return *registry;
}

thread_local std::string thread_last_error;

// The registry's answer, through the calling thread's cache (comm_handle.h says why).
bool IsLive(const braidComm* comm) {
  if (IsCachedLive(comm)) return true;
  Registry& registry = Live();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const bool live = registry.live.count(comm) != 0;
  if (live) {
    thread_cached_live = comm;
    thread_cached_removals = live_handle_removals.load(std::memory_order_relaxed);
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
  if (erased) live_handle_removals.fetch_add(1, std::memory_order_release);
  return erased;
}

Status CheckCommSlow(const braidComm* comm) {
  if (comm == nullptr) return Status::InvalidArgument("comm is NULL");
  if (!IsLive(comm)) {
    return Status::InvalidUsage("comm does not refer to a live communicator (destroyed, or never "
                                "initialized)");
  }
  return Status::Ok();
}

braidResult_t ReportError(braidComm* comm, const Status& status) {
  thread_last_error = status.message();
  if (comm != nullptr && IsLive(comm)) {
    std::lock_guard<std::mutex> lock(comm->last_error_mutex);
    comm->last_error = status.message();
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
