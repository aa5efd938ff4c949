// Cross-memory attach: the receiver copies a large message straight out of the sender's buffer
// (process_vm_readv), one copy instead of two through the ring. Thread ranks of one process copy
// with memcpy.
//
// Why a probe: process_vm_readv needs ptrace permission over the peer (Yama's ptrace_scope,
// containers and seccomp can refuse it with EPERM). Each side reads the other's process token at
// handshake time; where that fails the pair falls back to the ring for every size, and the first
// such failure in the process is logged (once).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#endif

namespace braid::transport::shm {

// ThreadSanitizer cannot see that a thread rank's buffer changes hands through the segment (the
// two sides map it at different addresses), so between thread ranks the hand-over of a buffer
// copied once is annotated on the buffer's own address. No-ops in normal builds.
inline void AnnotateRelease(const void* buffer) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(buffer));
#else
  (void)buffer;
#endif
}
inline void AnnotateAcquire(const void* buffer) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(buffer));
#else
  (void)buffer;
#endif
}

// A random number identifying this process (re-drawn after fork). Equal tokens and equal pids
// mean "same process".
uint64_t ProcessToken();
// Where ProcessToken()'s value lives, for the peer's probe.
uint64_t ProbeAddress();
// True if process_vm_readv of 8 bytes at `address` in `pid` works and yields `expected`; else
// false with `*why` describing the failure.
bool ProbeRead(pid_t pid, uint64_t address, uint64_t expected, std::string* why);
// Copies `bytes` bytes at `address` in process `pid` into `destination`. Returns "" or the error.
std::string ReadFromProcess(pid_t pid, void* destination, uint64_t address, size_t bytes);

}  // namespace braid::transport::shm
