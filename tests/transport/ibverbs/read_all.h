// Reading a fixed-size record from a pipe, for the verbs tests that fork a peer process and
// exchange addresses with it before linking.
#pragma once

#include <unistd.h>

#include <cstddef>

namespace braid::testing {

// Reads exactly `bytes` from `fd`; false at end of file or on an error.
inline bool ReadAll(int fd, void* data, size_t bytes) {
  char* at = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = read(fd, at, bytes);
    if (n <= 0) return false;
    at += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace braid::testing
