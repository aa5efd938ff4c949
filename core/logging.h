// Logging through spdlog, with a "host:pid:rank" prefix on every line.
//
// BRAID_DEBUG=WARN|INFO|TRACE picks the level (default WARN); BRAID_DEBUG_FILE=path writes to a
// file instead of stderr ("%h" in the path becomes the host name and "%p" the pid, as NCCL's
// NCCL_DEBUG_FILE does). Only core/logging.cc includes spdlog, so the rest of braid compiles
// quickly; callers build their line with a stream that is evaluated only when the level is on.
#pragma once

#include <sstream>
#include <string>

namespace braid {

enum class LogLevel : int { kTrace = 0, kInfo = 1, kWarn = 2, kOff = 3 };

bool LogEnabled(LogLevel level);
// Writes one line. `rank` < 0 prints "-" in the prefix (no communicator yet).
void LogLine(LogLevel level, int rank, const std::string& text);
// Re-reads BRAID_DEBUG / BRAID_DEBUG_FILE (tests use it; the library reads them once).
void ReloadLogSettings();

class LogStream {
 public:
  LogStream(LogLevel level, int rank) : level_(level), rank_(rank) {}
  ~LogStream() { LogLine(level_, rank_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  int rank_;
  std::ostringstream stream_;
};

}  // namespace braid

// Usage: BRAID_LOG(kInfo, rank) << "connected to " << peer;
#define BRAID_LOG(level, rank)                             \
  if (!::braid::LogEnabled(::braid::LogLevel::level)) {    \
  } else                                                   \
    ::braid::LogStream(::braid::LogLevel::level, (rank)).stream()
