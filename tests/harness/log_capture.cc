#include "tests/harness/log_capture.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/base/logging.h"

namespace braid::testing {
namespace {

std::optional<std::string> Get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

void Restore(const char* name, const std::optional<std::string>& value) {
  if (value) {
    setenv(name, value->c_str(), 1);
  } else {
    unsetenv(name);
  }
}

}  // namespace

LogCapture::LogCapture(const std::string& name, const char* level)
    : old_level_(Get("BRAID_DEBUG")), old_file_(Get("BRAID_DEBUG_FILE")) {
  static std::atomic<int> count{0};
  const char* dir = std::getenv("TEST_TMPDIR");
  path_ = std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "-" + std::to_string(++count) +
          "-" + std::to_string(getpid()) + ".log";
  std::remove(path_.c_str());  // the logger appends: nothing of an earlier run may be read
  setenv("BRAID_DEBUG_FILE", path_.c_str(), 1);
  setenv("BRAID_DEBUG", level, 1);
  ReloadLogSettings();
}

LogCapture::~LogCapture() {
  Restore("BRAID_DEBUG_FILE", old_file_);
  Restore("BRAID_DEBUG", old_level_);
  ReloadLogSettings();
}

std::string LogCapture::Text() const {
  std::ifstream in(path_);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace braid::testing
