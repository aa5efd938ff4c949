// core/base/logging.h: the host:pid:rank prefix, BRAID_DEBUG levels, BRAID_DEBUG_FILE and
// BRAID_DEBUG_SUBSYS filtering.
#include "core/base/logging.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace braid {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("log lines carry host:pid:rank and honour BRAID_DEBUG", "[core][logging]") {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(dir ? dir : "/tmp") + "/braid-log-%p.txt";
  std::string path = std::string(dir ? dir : "/tmp") + "/braid-log-" + std::to_string(getpid()) + ".txt";
  setenv("BRAID_DEBUG_FILE", pattern.c_str(), 1);
  setenv("BRAID_DEBUG", "INFO", 1);
  ReloadLogSettings();
  CHECK(LogEnabled(LogLevel::kInfo));
  CHECK_FALSE(LogEnabled(LogLevel::kTrace));
  BRAID_LOG(kInfo, 3) << "hello " << 42;
  BRAID_LOG(kTrace, 3) << "not written";

  setenv("BRAID_DEBUG", "WARN", 1);
  ReloadLogSettings();
  BRAID_LOG(kInfo, 3) << "suppressed";
  BRAID_LOG(kWarn, -1) << "no rank yet";

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string text = ReadFile(path);
  std::string prefix = std::string(host) + ":" + std::to_string(getpid()) + ":";
  CHECK(text.find(prefix + "3 braid INFO hello 42") != std::string::npos);
  CHECK(text.find(prefix + "- braid WARN no rank yet") != std::string::npos);
  CHECK(text.find("not written") == std::string::npos);
  CHECK(text.find("suppressed") == std::string::npos);
  unsetenv("BRAID_DEBUG_FILE");
  unsetenv("BRAID_DEBUG");
  ReloadLogSettings();
}

TEST_CASE("BRAID_DEBUG_SUBSYS filters INFO lines by subsystem, never WARN lines",
          "[core][logging]") {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/braid-subsys-" +
                           std::to_string(getpid()) + ".txt";
  setenv("BRAID_DEBUG_FILE", path.c_str(), 1);
  setenv("BRAID_DEBUG", "INFO", 1);
  const auto write_lines = [](const char* subsys) {
    if (subsys != nullptr) {
      setenv("BRAID_DEBUG_SUBSYS", subsys, 1);
    } else {
      unsetenv("BRAID_DEBUG_SUBSYS");
    }
    ReloadLogSettings();
    const std::string tag = std::string("<") + (subsys != nullptr ? subsys : "unset") + ">";
    BRAID_LOG(kInfo, 0) << tag << ": init line";
    BRAID_LOG_TO(kInfo, kColl, 0) << tag << ": coll line";
    BRAID_LOG_TO(kInfo, kTuning, 0) << tag << ": tuning line";
    BRAID_LOG_TO(kWarn, kColl, 0) << tag << ": coll warning";
  };
  write_lines(nullptr);
  write_lines("TUNING");
  write_lines("^coll");
  write_lines("COLL, TUNING");
  write_lines("COLL,bogus");
  const std::string text = ReadFile(path);
  const auto has = [&](const std::string& line) { return text.find(line) != std::string::npos; };
  for (const char* line : {"<unset>: init line", "<unset>: coll line", "<unset>: tuning line",
                           "<TUNING>: tuning line", "<^coll>: init line", "<^coll>: tuning line",
                           "<COLL, TUNING>: coll line", "<COLL, TUNING>: tuning line",
                           "<COLL,bogus>: coll line"}) {
    CAPTURE(line);
    CHECK(has(line));
  }
  for (const char* line : {"<TUNING>: init line", "<TUNING>: coll line", "<^coll>: coll line",
                           "<COLL, TUNING>: init line", "<COLL,bogus>: init line",
                           "<COLL,bogus>: tuning line"}) {
    CAPTURE(line);
    CHECK_FALSE(has(line));
  }
  for (const char* tag : {"unset", "TUNING", "^coll", "COLL, TUNING", "COLL,bogus"}) {
    CAPTURE(tag);
    CHECK(has("<" + std::string(tag) + ">: coll warning"));
  }
  CHECK(has("BRAID_DEBUG_SUBSYS: ignoring unknown subsystem(s) bogus"));
  unsetenv("BRAID_DEBUG_FILE");
  unsetenv("BRAID_DEBUG");
  unsetenv("BRAID_DEBUG_SUBSYS");
  ReloadLogSettings();
}

}  // namespace braid
