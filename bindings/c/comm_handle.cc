#include "bindings/c/comm_handle.h"

#include <unordered_set>

namespace braid::capi {
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

bool IsLive(const braidComm* comm) {
  Registry& registry = Live();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return registry.live.count(comm) != 0;
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
  return registry.live.erase(comm) != 0;
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
