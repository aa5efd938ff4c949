// What a braidComm_t points to, the registry of live handles, and last-error bookkeeping.
//
// Every entry point looks its handle up in the registry, so a NULL, destroyed or never-created
// communicator gets braidInvalidUsage with a message instead of a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "bindings/c/braid.h"
#include "core/communicator.h"
#include "core/base/status.h"

namespace braid::capi {
class Registrations;  // registrations.h
}  // namespace braid::capi

struct braidComm {
  std::unique_ptr<braid::Communicator> impl;
  // braidCommRegister's buffers, made on first use (comm_register.cc; shared_ptr: the type stays
  // incomplete here).
  std::shared_ptr<braid::capi::Registrations> registrations;
  std::mutex last_error_mutex;  // guards last_error
  std::string last_error;
};

namespace braid::capi {

// Makes `comm` a live handle.
void RegisterComm(braidComm* comm);
// Removes it; false if it was not live.
bool UnregisterComm(braidComm* comm);
// Bumped (under the registry's lock) by every removal of a live handle.
extern std::atomic<uint64_t> live_handle_removals;
// The handle this thread last found live in the registry, and `live_handle_removals` at that
// moment. __thread, not thread_local: a thread_local declared extern is read through a call to
// its TLS wrapper on every access, since another unit might initialise it dynamically.
// Hidden: the library's own, not part of its interface.
extern __thread const braidComm* thread_cached_live __attribute__((visibility("hidden")));
extern __thread uint64_t thread_cached_removals __attribute__((visibility("hidden")));

// Why the per-thread cache: every entry point checks its handle, and taking the registry's lock
// for a set lookup was ~2% of an 8-byte allreduce. A handle stays live until some handle is
// removed (creating others cannot make it dead), so the answer for the handle this thread used
// last stays true for as long as the removal count is unchanged. A destroy bumps the count after
// erasing, so a check that starts after braidCommDestroy returned always goes to the set. (A
// check racing a destroy of the same handle on another thread is the caller's bug either way:
// the lookup under the lock could not make that safe either.)
inline bool IsCachedLive(const braidComm* comm) {
  return comm != nullptr && comm == thread_cached_live &&
         thread_cached_removals == live_handle_removals.load(std::memory_order_acquire);
}

// OK if `comm` is live; otherwise InvalidArgument (NULL) or InvalidUsage (destroyed / unknown).
// Inline for the handle this thread used last; the registry lookup is out of line.
Status CheckCommSlow(const braidComm* comm);
inline Status CheckComm(const braidComm* comm) {
  if (IsCachedLive(comm)) return Status::Ok();
  return CheckCommSlow(comm);
}

// Records `status` as this thread's last error and, if `comm` is live, the communicator's; then
// returns its code as a braidResult_t. OK clears nothing (NCCL keeps the last failure).
braidResult_t ReportError(braidComm* comm, const Status& status);
inline braidResult_t Report(braidComm* comm, const Status& status) {
  if (status.ok()) return braidSuccess;
  return ReportError(comm, status);
}
const char* ThreadLastError();
const char* CommLastError(braidComm* comm);

// Runs `body` (returning Status) with every exception turned into braidInternalError, so no
// exception crosses the C boundary.
// Inlined into its caller, so that a collective's checks see the caller's constant flags.
template <typename Body>
__attribute__((always_inline)) inline braidResult_t Guarded(braidComm* comm, Body body) {
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
