// printf into a std::string, for the bench's fixed-width output. Internal to bench/.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace braid::bench {

// Every use formats one short line or JSON fragment: 512 bytes is the cap (longer text is cut).
inline std::string Printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
inline std::string Printf(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

}  // namespace braid::bench
