// Sends braid's log lines to a file of the test's own while alive, so a test can assert on what
// braid logged: BRAID_DEBUG_FILE names a fresh file under $TEST_TMPDIR and BRAID_DEBUG the level,
// and braid's logging re-reads them. On destruction both variables get back the values they had
// (or are unset again) and the logging re-reads them.
//
// For ranks that are threads of the test process (they share its logging). A rank that is a
// process of its own sets its log file itself, before its first communicator.
#pragma once

#include <optional>
#include <string>

namespace braid::testing {

class LogCapture {
 public:
  // `name` starts the file's name (made unique per capture and process); `level` is BRAID_DEBUG's
  // ("WARN", "INFO", "TRACE").
  LogCapture(const std::string& name, const char* level);
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged since the capture began.
  std::string Text() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<std::string> old_level_, old_file_;
};

}  // namespace braid::testing
