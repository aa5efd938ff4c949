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

// What an INFO or TRACE line is about, for BRAID_DEBUG_SUBSYS (NCCL_DEBUG_SUBSYS's syntax:
// "COLL,TUNING", "^COLL", "ALL"; the default is ALL). WARN lines print whatever the filter.
//   INIT    everything not below: creation, connections, transports, the store, failures
//   COLL    the algorithm of each collective call
//   TUNING  algorithm trials (algorithms/algorithm_trials.h)
enum class LogSubsystem : unsigned { kInit = 1, kColl = 2, kTuning = 4 };

bool LogEnabled(LogLevel level, LogSubsystem subsystem = LogSubsystem::kInit);
// Writes one line. `rank` < 0 prints "-" in the prefix (no communicator yet).
void LogLine(LogLevel level, int rank, const std::string& text);
// Re-reads BRAID_DEBUG / BRAID_DEBUG_SUBSYS / BRAID_DEBUG_FILE (tests use it; the library reads
// them once).
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

// Usage: BRAID_LOG(kInfo, rank) << "connected to " << peer;   (subsystem INIT)
//        BRAID_LOG_TO(kInfo, kColl, rank) << ...;
#define BRAID_LOG_TO(level, subsystem, rank)                                                 \
  if (!::braid::LogEnabled(::braid::LogLevel::level, ::braid::LogSubsystem::subsystem)) {    \
  } else                                                                                     \
    ::braid::LogStream(::braid::LogLevel::level, (rank)).stream()
#define BRAID_LOG(level, rank) BRAID_LOG_TO(level, kInit, rank)
