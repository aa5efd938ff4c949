// What a braidComm_t points to, the registry of live handles, and last-error bookkeeping.
//
// Every entry point looks its handle up in the registry, so a NULL, destroyed or never-created
// communicator gets braidInvalidUsage with a message instead of a crash.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "bindings/c/braid.h"
#include "core/communicator.h"
#include "core/status.h"

struct braidComm {
  std::unique_ptr<braid::Communicator> impl;
  std::mutex last_error_mutex;  // guards last_error
  std::string last_error;
};

namespace braid::capi {

// Makes `comm` a live handle.
void RegisterComm(braidComm* comm);
// Removes it; false if it was not live.
bool UnregisterComm(braidComm* comm);
// OK if `comm` is live; otherwise InvalidArgument (NULL) or InvalidUsage (destroyed / unknown).
Status CheckComm(const braidComm* comm);

// Records `status` as this thread's last error and, if `comm` is live, the communicator's; then
// returns its code as a braidResult_t. OK clears nothing (NCCL keeps the last failure).
braidResult_t Report(braidComm* comm, const Status& status);
const char* ThreadLastError();
const char* CommLastError(braidComm* comm);

// Runs `body` (returning Status) with every exception turned into braidInternalError, so no
// exception crosses the C boundary.
template <typename Body>
braidResult_t Guarded(braidComm* comm, Body body) {
  try {
    return Report(comm, body());
  } catch (const std::bad_alloc&) {
    return Report(comm, Status::SystemError("out of memory"));
  } catch (const std::exception& e) {
    return Report(comm, Status::Internal(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return Report(comm, Status::Internal("unexpected exception of unknown type"));
  }
}

}  // namespace braid::capi
