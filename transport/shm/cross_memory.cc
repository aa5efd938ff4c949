// process_vm_readv helpers (see cross_memory.h for the why).
#include "transport/shm/cross_memory.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace braid::transport::shm {
namespace {

// Read by peers through process_vm_readv, so it must live at a stable address.
volatile uint64_t g_token = 0;
std::atomic<pid_t> g_token_pid{0};
std::mutex g_token_mutex;  // leaf lock: guards re-drawing the token

}  // namespace

uint64_t ProcessToken() {
  pid_t pid = ::getpid();
  if (g_token_pid.load(std::memory_order_acquire) != pid) {
    std::lock_guard<std::mutex> lock(g_token_mutex);
    if (g_token_pid.load(std::memory_order_relaxed) != pid) {
      uint64_t value = 0;
      if (::getrandom(&value, sizeof(value), 0) != sizeof(value)) {
        value = (static_cast<uint64_t>(pid) << 32) ^ reinterpret_cast<uintptr_t>(&value);
      }
      g_token = value | 1;  // never 0
      g_token_pid.store(pid, std::memory_order_release);
    }
  }
  return g_token;
}

uint64_t ProbeAddress() {
  (void)ProcessToken();
  return reinterpret_cast<uint64_t>(&g_token);
}

bool ProbeRead(pid_t pid, uint64_t address, uint64_t expected, std::string* why) {
  if (pid <= 0) {
    *why = "the peer's pid is unknown";
    return false;
  }
  uint64_t value = 0;
  std::string error = ReadFromProcess(pid, &value, address, sizeof(value));
  if (!error.empty()) {
    *why = error;
    return false;
  }
  if (value != expected) {
    *why = "process_vm_readv read another process (pid " + std::to_string(pid) +
           " is not the peer: different pid namespace?)";
    return false;
  }
  return true;
}

std::string ReadFromProcess(pid_t pid, void* destination, uint64_t address, size_t bytes) {
  char* to = static_cast<char*>(destination);
  while (bytes > 0) {
    iovec local{to, bytes};
    iovec remote{reinterpret_cast<void*>(address), bytes};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::string("process_vm_readv from pid ") + std::to_string(pid) + ": " +
             std::strerror(errno) + (errno == EPERM ? " (ptrace restrictions?)" : "");
    }
    if (n == 0) return "process_vm_readv from pid " + std::to_string(pid) + " made no progress";
    to += n;
    address += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return "";
}

}  // namespace braid::transport::shm
