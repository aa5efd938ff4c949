#include "core/base/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <strings.h>

namespace braid {
namespace {

struct LogState {
  std::mutex mutex;  // guards logger replacement; spdlog loggers are themselves thread-safe
  std::shared_ptr<spdlog::logger> logger;
  std::string host;
  bool loaded = false;
};

// The level in force, or kNotLoaded before the settings were first read. A constant-initialised
// atomic outside LogState, so that LogEnabled -- called on every collective, for its INFO line --
// costs one relaxed load and a compare, not a call_once (about 1% of an 8-byte allreduce).
constexpr int kNotLoaded = -1;
std::atomic<int> g_level{kNotLoaded};
constexpr unsigned kAllSubsystems = 7;
std::atomic<unsigned> g_subsystems{kAllSubsystems};

LogState& State() {
  static LogState* state = new LogState();  // never destroyed: logging works during exit
  return *state;
}

LogLevel ParseLevel(const char* text) {
  if (text == nullptr || *text == '\0') return LogLevel::kWarn;
  if (strcasecmp(text, "TRACE") == 0) return LogLevel::kTrace;
  if (strcasecmp(text, "INFO") == 0) return LogLevel::kInfo;
  if (strcasecmp(text, "WARN") == 0) return LogLevel::kWarn;
  if (strcasecmp(text, "VERSION") == 0 || strcasecmp(text, "OFF") == 0 ||
      strcasecmp(text, "NONE") == 0) {
    return LogLevel::kOff;
  }
  return LogLevel::kWarn;
}

struct SubsystemName {
  const char* name;
  unsigned bits;
};
constexpr SubsystemName kSubsystems[] = {
    {"INIT", static_cast<unsigned>(LogSubsystem::kInit)},
    {"COLL", static_cast<unsigned>(LogSubsystem::kColl)},
    {"TUNING", static_cast<unsigned>(LogSubsystem::kTuning)},
    {"ALL", kAllSubsystems},
};

// BRAID_DEBUG_SUBSYS: comma-separated names, a leading '^' excluding them. Unknown names are
// collected into `unknown` (logged once the logger exists) and otherwise ignored, as NCCL does.
unsigned ParseSubsystems(const char* text, std::string* unknown) {
  if (text == nullptr || *text == '\0') return kAllSubsystems;
  std::string spec = text;
  const bool exclude = spec[0] == '^';
  if (exclude) spec.erase(0, 1);
  unsigned bits = 0;
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    std::string name = spec.substr(begin, end - begin);
    const size_t first = name.find_first_not_of(' '), last = name.find_last_not_of(' ');
    name = first == std::string::npos ? "" : name.substr(first, last - first + 1);
    bool known = name.empty();
    for (const SubsystemName& s : kSubsystems) {
      if (!name.empty() && strcasecmp(name.c_str(), s.name) == 0) {
        bits |= s.bits;
        known = true;
      }
    }
    if (!known) *unknown += (unknown->empty() ? "" : ", ") + name;
    begin = end + 1;
  }
  return exclude ? kAllSubsystems & ~bits : bits;
}

std::string ExpandPath(const std::string& pattern, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') { out += host; ++i; continue; }
      if (c == 'p') { out += std::to_string(getpid()); ++i; continue; }
      if (c == '%') { out += '%'; ++i; continue; }
    }
    out += pattern[i];
  }
  return out;
}

void LoadLocked(LogState& state) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  state.host = host;
  std::string unknown_subsystems;
  g_subsystems.store(ParseSubsystems(std::getenv("BRAID_DEBUG_SUBSYS"), &unknown_subsystems),
                     std::memory_order_relaxed);
  g_level.store(static_cast<int>(ParseLevel(std::getenv("BRAID_DEBUG"))), std::memory_order_relaxed);
  const char* file = std::getenv("BRAID_DEBUG_FILE");
  std::shared_ptr<spdlog::logger> logger;
  if (file != nullptr && *file != '\0') {
    try {
      auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(ExpandPath(file, state.host));
      logger = std::make_shared<spdlog::logger>("braid", sink);
    } catch (const std::exception&) {
      logger = nullptr;  // fall back to stderr below; a bad path must not stop the job
    }
  }
  if (!logger) {
    logger = std::make_shared<spdlog::logger>(
        "braid", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  }
  logger->set_pattern("%v");  // braid writes its own prefix
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::trace);
  state.logger = logger;
  state.loaded = true;
  if (!unknown_subsystems.empty()) {
    logger->warn(state.host + ":" + std::to_string(getpid()) +
                 ":- braid WARN BRAID_DEBUG_SUBSYS: ignoring unknown subsystem(s) " +
                 unknown_subsystems + " (known: INIT, COLL, TUNING, ALL)");
  }
}

LogState& LoadedState() {
  LogState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.loaded) LoadLocked(state);
  return state;
}

}  // namespace

bool LogEnabled(LogLevel level, LogSubsystem subsystem) {
  int threshold = g_level.load(std::memory_order_relaxed);
  if (threshold == kNotLoaded) {
    LoadedState();
    threshold = g_level.load(std::memory_order_relaxed);
  }
  if (static_cast<int>(level) < threshold) return false;
  return level >= LogLevel::kWarn ||
         (g_subsystems.load(std::memory_order_relaxed) & static_cast<unsigned>(subsystem)) != 0;
}

void LogLine(LogLevel level, int rank, const std::string& text) {
  LogState& state = LoadedState();
  std::shared_ptr<spdlog::logger> logger;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    logger = state.logger;
  }
  static const char* kNames[] = {"TRACE", "INFO", "WARN", "OFF"};
  std::string rank_text = rank < 0 ? "-" : std::to_string(rank);
  std::string line = state.host + ":" + std::to_string(getpid()) + ":" + rank_text + " braid " +
                     kNames[static_cast<int>(level)] + " " + text;
  logger->log(level == LogLevel::kWarn ? spdlog::level::warn : spdlog::level::info, line);
}

void ReloadLogSettings() {
  LogState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  LoadLocked(state);
}

}  // namespace braid
