// The calibration file: parsing (valid files, errors naming the line, unknown keys, bad values),
// the built-in table as the fallback, the link model a calibration gives, the text bench/calibrate
// writes, where a process looks for the file, and (tag [process], its own target) that a
// communicator prices with the file the environment names, read once per process.
//
// No case checks a measured number: the built-in table is this project's development VMs', and
// what a file states is whatever the test writes.
#include <algorithm>
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/calibration.h"
#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "bindings/c/braid.h"
#include "tests/harness/log_capture.h"

namespace braid::algorithms {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

Calibration MustParse(const std::string& text, const std::string& file = "test.cal",
                      std::vector<std::string>* warnings = nullptr) {
  Result<Calibration> parsed = Calibration::Parse(text, file, warnings);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return std::move(parsed).value();
}

bool Same(const TransportCalibration& a, const TransportCalibration& b) {
  for (const CalibrationKey& key : CalibrationKeys()) {
    if (a.*(key.field) != b.*(key.field)) return false;
  }
  return true;
}

// Sets (or with nullptr unsets) an environment variable for one scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

const char* kValid = R"(# a calibration written by hand
version = 1

shm.latency_us = 3.5         # trailing comments are fine
  shm.bandwidth_gbps=2.25
tcp.latency_us_core_per_rank = 42
tcp.fan_out_us = 0
)";

}  // namespace

TEST_CASE("a valid file states its values; what it leaves out stays built-in", "[calibration]") {
  const Calibration built_in = Calibration::BuiltIn();
  const Calibration file = MustParse(kValid, "hand.cal");
  CHECK(file.source() == "hand.cal");
  CHECK(file.Of("shm").latency_us == 3.5);
  CHECK(file.Of("shm").bandwidth_gbps == 2.25);
  CHECK(file.Of("tcp").latency_us_core_per_rank == 42);
  CHECK(file.Of("tcp").fan_out_us == 0);  // >= 0 keys may be 0
  CHECK(file.Of("shm").reduce_gbps == built_in.Of("shm").reduce_gbps);
  CHECK(file.Of("shm").latency_us_core_per_rank == built_in.Of("shm").latency_us_core_per_rank);
  CHECK(file.Of("tcp").latency_us == built_in.Of("tcp").latency_us);
  const CalibrationValues expected = {
      {"shm", {{"latency_us", 3.5}, {"bandwidth_gbps", 2.25}}},
      {"tcp", {{"latency_us_core_per_rank", 42}, {"fan_out_us", 0}}},
  };
  CHECK(file.values() == expected);
  CHECK(built_in.values().empty());
  CHECK(built_in.source().find("built-in") != std::string::npos);
}

TEST_CASE("transports without an entry of their own are priced as tcp", "[calibration]") {
  const Calibration built_in = Calibration::BuiltIn();
  CHECK(Same(built_in.Of("ibverbs"), built_in.Of("tcp")));
  CHECK(Same(built_in.Of(nullptr), built_in.Of("tcp")));
  // A file's tcp numbers carry over to them, and a file may give one its own.
  const Calibration file = MustParse("version = 1\ntcp.latency_us = 42\nibverbs.bandwidth_gbps = 12\n");
  CHECK(file.Of("cuda_ipc").latency_us == 42);
  CHECK(file.Of("ibverbs").latency_us == 42);
  CHECK(file.Of("ibverbs").bandwidth_gbps == 12);
  CHECK(file.Of("tcp").bandwidth_gbps == built_in.Of("tcp").bandwidth_gbps);
}

TEST_CASE("the link model takes each number from its key", "[calibration]") {
  // Every key a distinct value, so a number taken from the wrong key shows.
  std::string text = "version = 1\n";
  double value = 1;
  for (const char* transport : {"shm", "tcp"}) {
    for (const CalibrationKey& key : CalibrationKeys()) {
      text += std::string(transport) + "." + key.name + " = " + std::to_string(value) + "\n";
      value += 1;
    }
  }
  const Calibration file = MustParse(text);
  for (const char* transport : {"shm", "tcp", "other"}) {
    const TransportCalibration& t = file.Of(transport);
    for (bool oversubscribed : {false, true}) {
      CAPTURE(transport, oversubscribed);
      const LinkModel link = file.Model(transport, oversubscribed, 3.0);
      CHECK(link.latency_us == (oversubscribed ? t.latency_us : t.latency_us_core_per_rank));
      CHECK(link.message_us == (oversubscribed ? t.message_us : t.message_us_core_per_rank));
      CHECK(link.bandwidth_gbps == t.bandwidth_gbps);
      CHECK(link.reduce_gbps == t.reduce_gbps);
      CHECK(link.memory_reduce_gbps == t.memory_reduce_gbps);
      CHECK(link.cache_bytes == t.cache_bytes);
      CHECK(link.pipeline_us == t.pipeline_us);
      CHECK(link.fan_out_us == t.fan_out_us);
      CHECK(link.shared_cores == oversubscribed);
      CHECK(link.ranks_per_cpu == (oversubscribed ? 3.0 : 1.0));
      // A property of shared memory's code, not a number of the file.
      CHECK(link.reduces_on_receive == (std::string(transport) == "shm"));
      // The link inside a host, for jobs across hosts: always shared memory's numbers.
      const TransportCalibration& shm = file.Of("shm");
      CHECK(link.intra_host_latency_us ==
            (oversubscribed ? shm.latency_us : shm.latency_us_core_per_rank));
      CHECK(link.intra_host_bandwidth_gbps == shm.bandwidth_gbps);
      CHECK(link.intra_host_fan_out_us == shm.fan_out_us);
      CHECK(link.intra_host_reduces_on_receive);
      // Single-copy reads: shared memory's measurement, only where the job is on shm; with
      // shared cores from where both crossovers favour one copy (here the larger).
      const bool on_shm = std::string(transport) == "shm";
      CHECK(link.peer_read_gbps == (on_shm ? t.single_copy_gbps : 0));
      CHECK(link.peer_read_min_bytes ==
            (!on_shm ? 0
                     : oversubscribed ? std::max(t.single_copy_bytes, t.single_copy_bytes_shared_cores)
                                      : t.single_copy_bytes));
    }
  }
  // A crossover of 0 (the ring won at every size) where ranks share cores: never read.
  const Calibration never = MustParse(
      "version = 1\nshm.single_copy_gbps = 3\nshm.single_copy_bytes = 65536\n"
      "shm.single_copy_bytes_shared_cores = 0\n");
  CHECK(never.Model("shm", true, 2.0).peer_read_min_bytes == 0);
  CHECK(never.Model("shm", false, 1.0).peer_read_min_bytes == 65536);
  // Fewer ranks than CPUs never counts as less than one per CPU.
  CHECK(file.Model("shm", true, 0.5).ranks_per_cpu == 1.0);
  CHECK_FALSE(file.Model(nullptr, false, 1).reduces_on_receive);
}

TEST_CASE("a file's values change the pick", "[calibration][select]") {
  // The same call under two files: dear steps favour recursive doubling's few steps, a slow wire
  // the ring's fewer bytes.
  const AlgorithmPolicy rd_ring = AlgorithmPolicy::Parse("allreduce:rd,ring").value();
  CollectiveArgs args;
  args.kind = Collective::kAllReduce;
  args.type = DataType::kUint8;
  args.count = 1 << 20;
  auto pick = [&](const std::string& text) {
    const LinkModel link = MustParse("version = 1\n" + text).Model("tcp", false, 1);
    Result<const Algorithm*> chosen = SelectAlgorithm(args, 4, rd_ring, link);
    REQUIRE(chosen.ok());
    return std::string(chosen.value()->name);
  };
  CHECK(pick("tcp.latency_us_core_per_rank = 100000\ntcp.bandwidth_gbps = 100\n") == "rd");
  CHECK(pick("tcp.latency_us_core_per_rank = 0\ntcp.bandwidth_gbps = 0.001\n") == "ring");
}

TEST_CASE("malformed files are rejected, naming file and line", "[calibration][parse]") {
  struct Case {
    std::string text;
    std::string where;  // "file:line:" or "file:" for the whole file
    std::string says;
  };
  const std::vector<Case> cases = {
      {"version = 1\nshm.latency_us 8\n", "bad.cal:2:", "expected 'key = value'"},
      {"version = 1\n\n= 8\n", "bad.cal:3:", "expected 'key = value'"},
      {"version = 1\nshm.latency_us =\n", "bad.cal:2:", "expected 'key = value'"},
      {"version = 1\nshm.latency_us = fast\n", "bad.cal:2:", "is not a number"},
      {"version = 1\nshm.latency_us = 8us\n", "bad.cal:2:", "is not a number"},
      {"version = 1\nshm.latency_us = 8 9\n", "bad.cal:2:", "is not a number"},
      {"version = 1\nshm.latency_us = 1e999\n", "bad.cal:2:", "is not a number"},
      {"version = 1\n# x\nshm.latency_us = -1\n", "bad.cal:3:", "must be a finite number >= 0"},
      {"version = 1\nshm.latency_us = nan\n", "bad.cal:2:", "finite"},
      {"version = 1\nshm.latency_us = NaN\n", "bad.cal:2:", "finite"},
      {"version = 1\nshm.latency_us = inf\n", "bad.cal:2:", "finite"},
      {"version = 1\ntcp.bandwidth_gbps = 0\n", "bad.cal:2:", "> 0"},
      {"version = 1\ntcp.reduce_gbps = -20\n", "bad.cal:2:", "> 0"},
      {"version = 1\nshm.latency_us = 1\nshm.latency_us = 2\n", "bad.cal:3:",
       "given twice (first on line 2)"},
      {"version = 1\nsh m.latency_us = 1\n", "bad.cal:2:", "not a transport name"},
      {"version = 1\n.latency_us = 1\n", "bad.cal:2:", "not a transport name"},
      {"version = 2\nshm.latency_us = 1\n", "bad.cal:1:", "version 2 is not supported"},
      {"shm.latency_us = 1\n", "bad.cal:", "no 'version = 1' line"},
      {"", "bad.cal:", "no 'version = 1' line"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    Result<Calibration> parsed = Calibration::Parse(c.text, "bad.cal");
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == Code::kInvalidArgument);
    const std::string message = parsed.status().message();
    CAPTURE(message);
    CHECK(message.rfind(c.where, 0) == 0);
    CHECK(message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("unknown keys are skipped with a warning naming the line", "[calibration][parse]") {
  std::vector<std::string> warnings;
  const Calibration file = MustParse(
      "version = 1\nshm.latency_us = 2\nshm.warp_factor = 9\nflavour = mint\n"
      "tcp.future_key = not even a number\ntcp.latency_us = 30\n",
      "new.cal", &warnings);
  REQUIRE(warnings.size() == 3);
  CHECK(warnings[0] == "new.cal:3: unknown key 'shm.warp_factor' (skipped)");
  CHECK(warnings[1] == "new.cal:4: unknown key 'flavour' (skipped)");
  CHECK(warnings[2] == "new.cal:5: unknown key 'tcp.future_key' (skipped)");
  CHECK(file.Of("shm").latency_us == 2);
  CHECK(file.Of("tcp").latency_us == 30);
  // Without a place for warnings they are dropped, not an error.
  CHECK(Calibration::Parse("version = 1\nshm.warp_factor = 9\n", "new.cal").ok());
}

TEST_CASE("files on disk: present, missing", "[calibration][load]") {
  const std::string path = TempDir() + "/calibration_load";
  WriteText(path, kValid);
  Result<Calibration> loaded = Calibration::Load(path);
  REQUIRE(loaded.ok());
  CHECK(loaded.value().source() == path);
  CHECK(loaded.value().Of("shm").latency_us == 3.5);

  const std::string missing = TempDir() + "/no_such_calibration";
  Result<Calibration> absent = Calibration::Load(missing);
  REQUIRE_FALSE(absent.ok());
  CHECK(absent.status().code() == Code::kSystemError);
  CHECK(absent.status().message().find(missing) != std::string::npos);
  CHECK(absent.status().message().find("No such file") != std::string::npos);

  // A malformed file on disk names its path and line.
  WriteText(path, "version = 1\nshm.latency_us = -3\n");
  Result<Calibration> bad = Calibration::Load(path);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().rfind(path + ":2:", 0) == 0);
}

TEST_CASE("what bench/calibrate writes reads back as it was measured", "[calibration][format]") {
  const CalibrationValues measured = {
      {"shm", {{"latency_us", 7.25}, {"latency_us_core_per_rank", 0.1}, {"bandwidth_gbps", 1.3},
               {"reduce_gbps", 21.7}, {"memory_reduce_gbps", 5.48}}},
      {"tcp", {{"latency_us", 31}, {"bandwidth_gbps", 0.123456789012345}}},
      {"ibverbs", {{"bandwidth_gbps", 11}}},
  };
  const std::string text = FormatCalibration(measured, "written by a test\non two lines");
  CAPTURE(text);
  CHECK(text.rfind("# written by a test\n# on two lines\n", 0) == 0);
  CHECK(text.find("version = 1\n") != std::string::npos);
  CHECK(text.find("\nshm.latency_us = 7.25  # ") != std::string::npos);
  // Keys not measured are there, commented out, with their built-in value.
  const Calibration built_in = Calibration::BuiltIn();
  std::ostringstream fan_out;
  fan_out << "\n# tcp.fan_out_us = " << built_in.Of("tcp").fan_out_us << "  (built-in: ";
  CHECK(text.find(fan_out.str()) != std::string::npos);

  std::vector<std::string> warnings;
  const Calibration parsed = MustParse(text, "written.cal", &warnings);
  CHECK(warnings.empty());
  CHECK(parsed.values() == measured);
  CHECK(parsed.Of("shm").message_us == built_in.Of("shm").message_us);
  CHECK(parsed.Of("ibverbs").latency_us == 31);  // from the file's tcp
  // Nothing measured: a file that states nothing and prices as the built-in table.
  const Calibration empty = MustParse(FormatCalibration({}, "nothing"));
  CHECK(empty.values().empty());
  CHECK(empty.Fingerprint() == built_in.Fingerprint());
}

TEST_CASE("a calibration travels as a record and reads back with the same numbers",
          "[calibration][record]") {
  SECTION("a file: its text travels, unknown keys and all, and parses to the same numbers") {
    const std::string text = std::string(kValid) + "shm.warp_factor = 9\n";
    const Calibration sent = MustParse(text, "/shared/braid.cal");
    Result<Calibration> got = Calibration::Deserialize(sent.Serialize(), "rank 0's ");
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    CHECK(got.value().source() == "rank 0's /shared/braid.cal");
    CHECK(got.value().Fingerprint() == sent.Fingerprint());
    CHECK(got.value().values() == sent.values());
    for (const char* transport : {"shm", "tcp", "ibverbs"}) {
      CHECK(Same(got.value().Of(transport), sent.Of(transport)));
    }
    // What arrived is a file again: sent on, it still carries the text.
    CHECK(got.value().Serialize().find(text) != std::string::npos);
  }
  SECTION("the built-in table travels without numbers and stays the built-in table") {
    const Calibration built_in = Calibration::BuiltIn();
    Result<Calibration> got = Calibration::Deserialize(built_in.Serialize(), "rank 0's ");
    REQUIRE(got.ok());
    CHECK(got.value().source() == "rank 0's " + built_in.source());
    CHECK(got.value().Fingerprint() == built_in.Fingerprint());
    CHECK(got.value().values().empty());
  }
  SECTION("a file stating nothing is still a file, and prices as the built-in table") {
    const Calibration sent = MustParse("version = 1\n", "empty.cal");
    Result<Calibration> got = Calibration::Deserialize(sent.Serialize(), "");
    REQUIRE(got.ok());
    CHECK(got.value().source() == "empty.cal");
    CHECK(got.value().Fingerprint() == Calibration::BuiltIn().Fingerprint());
  }
  SECTION("a record that is not one is refused, saying why") {
    const std::string good = MustParse(kValid, "a.cal").Serialize();
    struct Case {
      std::string record;
      std::string says;
    };
    const Case cases[] = {
        {"", "starts with 'braid-calibration 1'"},
        {"braid-calibration 2\nfile\na.cal\nversion = 1\n", "this one with 'braid-calibration 2'"},
        {"braid-calibration 1\nfile", "cut short"},
        {"braid-calibration 1\nfile\na.cal", "cut short"},
        {"braid-calibration 1\nsomething\na.cal\n", "not 'something'"},
        {"braid-calibration 1\nfile\na.cal\nversion = 1\nshm.latency_us = -1\n",
         "a.cal:2: shm.latency_us = -1"},
        {good.substr(0, good.find("version")), "no 'version = 1' line"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.record);
      Result<Calibration> got = Calibration::Deserialize(c.record, "");
      REQUIRE_FALSE(got.ok());
      CHECK(got.status().code() == Code::kInvalidArgument);
      CHECK_THAT(got.status().message(), Catch::Matchers::Contains(c.says));
    }
  }
}

TEST_CASE("the fingerprint follows the numbers", "[calibration]") {
  const Calibration built_in = Calibration::BuiltIn();
  CHECK(built_in.Fingerprint().size() == 16);
  CHECK(built_in.Fingerprint() == Calibration::BuiltIn().Fingerprint());
  CHECK(MustParse(kValid).Fingerprint() == MustParse(std::string(kValid) + "# more\n").Fingerprint());
  CHECK(MustParse(kValid).Fingerprint() != built_in.Fingerprint());
  CHECK(MustParse("version = 1\nshm.latency_us = 1\n").Fingerprint() !=
        MustParse("version = 1\nshm.latency_us = 1.0001\n").Fingerprint());
}

TEST_CASE("where a process looks for its calibration", "[calibration][env]") {
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv unset("BRAID_CALIBRATION", nullptr);
    CHECK(CalibrationPath() == "/home/someone/.cache/braid/calibration");
    ScopedEnv xdg("XDG_CACHE_HOME", "/var/cache/me");
    CHECK(CalibrationPath() == "/var/cache/me/braid/calibration");
    ScopedEnv relative_xdg("XDG_CACHE_HOME", "relative");  // not absolute: ignored, as XDG says
    CHECK(CalibrationPath() == "/home/someone/.cache/braid/calibration");
  }
  {
    ScopedEnv empty("BRAID_CALIBRATION", "");
    CHECK(CalibrationPath() == "/home/someone/.cache/braid/calibration");
  }
  {
    ScopedEnv named("BRAID_CALIBRATION", "/etc/braid.cal");
    CHECK(CalibrationPath() == "/etc/braid.cal");
  }
  {
    ScopedEnv none("BRAID_CALIBRATION", "none");
    CHECK(CalibrationPath().empty());
  }
  {
    ScopedEnv unset("BRAID_CALIBRATION", nullptr);
    ScopedEnv no_home("HOME", nullptr);
    CHECK(CalibrationPath().empty());
  }
}

TEST_CASE("the environment's calibration: file, defaults, and a warning when a file is bad",
          "[calibration][env]") {
  const std::string built_in_print = Calibration::BuiltIn().Fingerprint();
  SECTION("no file at the default location: the built-in table, said at INFO") {
    const std::string home = TempDir() + "/empty_home";
    mkdir(home.c_str(), 0755);
    ScopedEnv unset("BRAID_CALIBRATION", nullptr);
    ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv at("HOME", home.c_str());
    testing::LogCapture log("default_missing", "INFO");
    const Calibration calibration = LoadCalibrationFromEnvironment();
    CHECK(calibration.Fingerprint() == built_in_print);
    const std::string text = log.Text();
    CAPTURE(text);
    CHECK(text.find("built-in") != std::string::npos);
    CHECK(text.find("no calibration file at " + home + "/.cache/braid/calibration") !=
          std::string::npos);
    CHECK(text.find("WARN") == std::string::npos);
  }
  SECTION("a file at the default location is read") {
    const std::string cache = TempDir() + "/xdg";
    mkdir(cache.c_str(), 0755);
    mkdir((cache + "/braid").c_str(), 0755);
    WriteText(cache + "/braid/calibration", kValid);
    ScopedEnv unset("BRAID_CALIBRATION", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", cache.c_str());
    testing::LogCapture log("default_present", "INFO");
    const Calibration calibration = LoadCalibrationFromEnvironment();
    CHECK(calibration.source() == cache + "/braid/calibration");
    CHECK(calibration.Of("shm").latency_us == 3.5);
    CHECK(log.Text().find("cost model calibration: " + cache + "/braid/calibration (checksum " +
                          calibration.Fingerprint() + ")") != std::string::npos);
  }
  SECTION("BRAID_CALIBRATION=none: the built-in table without looking") {
    ScopedEnv none("BRAID_CALIBRATION", "none");
    testing::LogCapture log("none", "INFO");
    CHECK(LoadCalibrationFromEnvironment().Fingerprint() == built_in_print);
    CHECK(log.Text().find("BRAID_CALIBRATION=none") != std::string::npos);
  }
  SECTION("a named file that is missing: WARN naming it, then the built-in table") {
    const std::string missing = TempDir() + "/not_there.cal";
    ScopedEnv named("BRAID_CALIBRATION", missing.c_str());
    testing::LogCapture log("named_missing", "INFO");
    CHECK(LoadCalibrationFromEnvironment().Fingerprint() == built_in_print);
    const std::string text = log.Text();
    CAPTURE(text);
    CHECK(text.find("WARN") != std::string::npos);
    CHECK(text.find(missing) != std::string::npos);
    CHECK(text.find("built-in") != std::string::npos);
  }
  SECTION("a malformed file: WARN naming file and line, then the built-in table") {
    const std::string path = TempDir() + "/malformed.cal";
    WriteText(path, "version = 1\nshm.latency_us = 2\ntcp.bandwidth_gbps = nan\n");
    ScopedEnv named("BRAID_CALIBRATION", path.c_str());
    testing::LogCapture log("malformed", "INFO");
    const Calibration calibration = LoadCalibrationFromEnvironment();
    CHECK(calibration.Fingerprint() == built_in_print);  // nothing of a broken file is used
    const std::string text = log.Text();
    CAPTURE(text);
    CHECK(text.find("WARN") != std::string::npos);
    CHECK(text.find(path + ":3:") != std::string::npos);
  }
  SECTION("unknown keys: WARN naming the line, the rest of the file used") {
    const std::string path = TempDir() + "/newer.cal";
    WriteText(path, "version = 1\nshm.latency_us = 2\nshm.warp_factor = 9\n");
    ScopedEnv named("BRAID_CALIBRATION", path.c_str());
    testing::LogCapture log("unknown_key", "INFO");
    const Calibration calibration = LoadCalibrationFromEnvironment();
    CHECK(calibration.Of("shm").latency_us == 2);
    const std::string text = log.Text();
    CAPTURE(text);
    CHECK(text.find(path + ":3: unknown key 'shm.warp_factor'") != std::string::npos);
  }
}

TEST_CASE("a communicator prices with the file BRAID_CALIBRATION names, read once per process",
          "[process]") {
  // Its own process (BUILD: calibration_process_test): nothing has read the calibration yet.
  const std::string path = TempDir() + "/process.cal";
  // A 1-rank job has no transport (tcp's numbers) and a core per rank.
  WriteText(path, "version = 1\ntcp.latency_us_core_per_rank = 123.5\n");
  ScopedEnv named("BRAID_CALIBRATION", path.c_str());
  testing::LogCapture log("process", "INFO");
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  braidComm_t comm = nullptr;
  REQUIRE(braidCommInitRank(&comm, 1, id, 0) == braidSuccess);
  braidCommDestroy(comm);
  std::string text = log.Text();
  CAPTURE(text);
  CHECK(text.find("cost model calibration: " + path) != std::string::npos);
  CHECK(text.find("cost model: tcp, a core per rank: latency 123.5 us") != std::string::npos);
  CHECK(text.find("from " + path) != std::string::npos);
  CHECK(ProcessCalibration().source() == path);

  // Read once: another file named later changes nothing for this process.
  const std::string other = TempDir() + "/other.cal";
  WriteText(other, "version = 1\ntcp.latency_us_core_per_rank = 7\n");
  ScopedEnv renamed("BRAID_CALIBRATION", other.c_str());
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  REQUIRE(braidCommInitRank(&comm, 1, id, 0) == braidSuccess);
  braidCommDestroy(comm);
  CHECK(ProcessCalibration().source() == path);
  text = log.Text();
  CHECK(text.find(other) == std::string::npos);
  CHECK(text.find("latency 7 us") == std::string::npos);
}

}  // namespace braid::algorithms
