// core/: Status and Result, datatypes, environment configuration, logging prefix and levels.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/base/config.h"
#include "core/base/datatype.h"
#include "core/base/deadline.h"
#include "core/base/logging.h"
#include "core/base/status.h"

namespace braid {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  int half = 0;
  BRAID_ASSIGN_OR_RETURN(half, Half(x));
  BRAID_ASSIGN_OR_RETURN(*out, Half(half));
  return Status::Ok();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("Status and Result carry codes and context", "[core]") {
  int out = 0;
  CHECK(Quarter(8, &out).ok());
  CHECK(out == 2);
  Status odd = Quarter(6, &out);
  CHECK(odd.code() == Code::kInvalidArgument);
  CHECK(odd.message() == "3 is odd");
  Status wrapped = odd.WithContext("rank 2");
  CHECK(wrapped.message() == "rank 2: 3 is odd");
  CHECK(wrapped.ToString() == "invalid argument: rank 2: 3 is odd");
  CHECK(Status::Ok().WithContext("ignored").ok());
  // A Result made from an OK status is an internal error, never a value-less success.
  Result<int> broken{Status::Ok()};
  CHECK(broken.status().code() == Code::kInternalError);
}

TEST_CASE("Status copies share the message; moves and assignments keep it valid", "[core]") {
  Status original = Status::Timeout("rank 1 did not answer");
  {
    Status copy = original;  // shares the text
    Status assigned;
    assigned = copy;
    CHECK(assigned.message() == "rank 1 did not answer");
    CHECK(assigned.code() == Code::kTimeout);
    Status moved = std::move(copy);
    CHECK(moved.message() == "rank 1 did not answer");
    assigned = Status::Ok();  // drops a reference
    CHECK(assigned.ok());
    CHECK(assigned.message().empty());
    moved = std::move(original);  // the last-but-one owner takes over
    CHECK(moved.message() == "rank 1 did not answer");
    original = moved;
  }
  // The copies above are gone; the text lives on in the last owner.
  CHECK(original.message() == "rank 1 did not answer");
  Status& self = original;
  original = self;  // self-assignment keeps it
  CHECK(original.code() == Code::kTimeout);
  CHECK(original.message() == "rank 1 did not answer");
  CHECK(Status::Ok().message().empty());
}

TEST_CASE("datatypes and ops: sizes and nccl-tests names", "[core]") {
  CHECK(DataTypeSize(DataType::kInt8) == 1);
  CHECK(DataTypeSize(DataType::kFloat16) == 2);
  CHECK(DataTypeSize(DataType::kBfloat16) == 2);
  CHECK(DataTypeSize(DataType::kUint32) == 4);
  CHECK(DataTypeSize(DataType::kFloat64) == 8);
  CHECK(std::string(DataTypeName(DataType::kFloat32)) == "float");
  CHECK(std::string(DataTypeName(DataType::kFloat16)) == "half");
  DataType t;
  CHECK(ParseDataType("bfloat16", &t));
  CHECK(t == DataType::kBfloat16);
  CHECK(ParseDataType("float32", &t));
  CHECK(t == DataType::kFloat32);
  CHECK_FALSE(ParseDataType("complex", &t));
  ReduceOp op;
  CHECK(ParseReduceOp("avg", &op));
  CHECK(op == ReduceOp::kAvg);
  CHECK_FALSE(ParseReduceOp("xor", &op));
  CHECK_FALSE(IsValidDataType(10));
  CHECK_FALSE(IsValidReduceOp(-1));
}

TEST_CASE("integer settings from the environment are validated", "[core]") {
  setenv("BRAID_TEST_INT", "1500", 1);
  CHECK(IntFromEnvironment("BRAID_TEST_INT", 7).value() == 1500);
  setenv("BRAID_TEST_INT", "15x", 1);
  auto bad = IntFromEnvironment("BRAID_TEST_INT", 7);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "BRAID_TEST_INT='15x' is not a non-negative integer");
  setenv("BRAID_TEST_INT", "-3", 1);
  CHECK_FALSE(IntFromEnvironment("BRAID_TEST_INT", 7).ok());
  unsetenv("BRAID_TEST_INT");
  CHECK(IntFromEnvironment("BRAID_TEST_INT", 7).value() == 7);
}

TEST_CASE("deadlines", "[core]") {
  CHECK_FALSE(Deadline::Never().Expired());
  CHECK(Deadline::AfterMs(0).Expired());
  CHECK(Deadline::AfterMs(60000).RemainingMs() > 50000);
  CHECK(Deadline::Never().Min(10).RemainingMs() <= 10);
}

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
