// braidConfig_t::algo reaches the communicator's selector: it replaces BRAID_ALGO (set to
// "allreduce:ring" for this binary in tests/bindings/BUILD) for its communicator only, NULL or a
// struct from an older header keeps the environment's, and a bad value fails creation quoting it.
//
// Which algorithm ran is read from braid's own COLL log ("allreduce #0 count N ... algorithm
// NAME"), which BUILD turns on and this file sends to a file under $TEST_TMPDIR before braid's
// logging first reads the environment.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

std::string LogPath() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/braid_config_algo_test.log";
}

// Before main, hence before braid's logging loads its settings.
const bool kLogToFile = [] {
  setenv("BRAID_DEBUG_FILE", LogPath().c_str(), 1);
  return true;
}();

// The algorithm names logged for allreduce calls of `count` elements, one per rank and call.
std::vector<std::string> AlgorithmsLogged(size_t count) {
  std::ifstream in(LogPath());
  std::vector<std::string> names;
  const std::string call = " count " + std::to_string(count) + " ";
  const std::string marker = "algorithm ";
  for (std::string line; std::getline(in, line);) {
    if (line.find("allreduce #") == std::string::npos || line.find(call) == std::string::npos) {
      continue;
    }
    const size_t at = line.find(marker);
    if (at == std::string::npos) continue;
    std::istringstream rest(line.substr(at + marker.size()));
    std::string name;
    rest >> name;
    names.push_back(name);
  }
  return names;
}

// Two ranks, one allreduce of `count` floats, checked; `config` as given to every rank.
void AllReduceWith(const braidConfig_t& config, size_t count) {
  CommJob job;
  job.config = config;
  if (job.config.timeoutMs == BRAID_CONFIG_UNDEF_INT) job.config.timeoutMs = 30000;
  CAPTURE(Describe(job), count);
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int size) -> std::string {
    std::vector<float> data(count, static_cast<float>(rank + 1));
    braidResult_t rc =
        braidAllReduce(data.data(), data.data(), count, braidFloat32, braidSum, comm, nullptr);
    if (rc != braidSuccess) return std::string("allreduce: ") + braidGetLastError(comm);
    const float want = static_cast<float>(size * (size + 1) / 2);
    for (float v : data) {
      if (v != want) return "allreduce result " + std::to_string(v) + ", expected " + std::to_string(want);
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

}  // namespace

TEST_CASE("config.algo forces the algorithm for its communicator only", "[config][algo]") {
  REQUIRE(kLogToFile);
  const char* env = std::getenv("BRAID_ALGO");
  REQUIRE(env != nullptr);
  REQUIRE(std::string(env) == "allreduce:ring");
  // Each case uses its own count, so its log lines are told apart.
  struct Case {
    const char* algo;  // nullptr: left at BRAID_CONFIG_INITIALIZER's "take the environment's"
    size_t count;
    const char* expected;
  };
  const Case cases[] = {
      {"allreduce:rd", 1001, "rd"},
      {"allreduce:tree", 1002, "tree"},
      {"AllReduce:RHD", 1003, "rhd"},  // the syntax is BRAID_ALGO's: case is ignored
      {"^ring;allreduce:direct", 1004, "direct"},
      {nullptr, 1005, "ring"},           // the environment's
  };
  for (const Case& c : cases) {
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.algo = c.algo;
    AllReduceWith(config, c.count);
    CAPTURE(c.algo == nullptr ? "(unset)" : c.algo);
    CHECK(AlgorithmsLogged(c.count) == std::vector<std::string>{c.expected, c.expected});
  }
}

TEST_CASE("config.algo \"\" lifts the environment's constraint", "[config][algo]") {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.algo = "";
  AllReduceWith(config, 3);
  const std::vector<std::string> logged = AlgorithmsLogged(3);
  REQUIRE(logged.size() == 2);
  CHECK(logged[0] == logged[1]);  // whatever the cost model picks, both ranks agree
  // 12 bytes on 2 ranks: the ring's 2(n-1) steps never beat one exchange, so a "ring" here
  // would mean the environment's constraint still applied.
  CHECK(logged[0] != "ring");
}

TEST_CASE("a struct from a header older than algo takes the environment's", "[config][algo]") {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.size = offsetof(braidConfig_t, algo);  // what the previous header's sizeof said
  config.algo = "allreduce:definitely-not-read";
  AllReduceWith(config, 1007);
  CHECK(AlgorithmsLogged(1007) == std::vector<std::string>{"ring", "ring"});
}

TEST_CASE("a bad config.algo fails creation, quoting it", "[config][algo]") {
  for (const char* bad : {"allreduce:bogus", "nosuchcollective:ring", "ring;ring"}) {
    CAPTURE(bad);
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.algo = bad;
    braidComm_t comm = nullptr;
    CHECK(braidCommInitRankConfig(&comm, 1, NewId(), 0, &config) == braidInvalidArgument);
    CHECK(comm == nullptr);
    CHECK(std::string(braidGetLastError(nullptr)).find(bad) != std::string::npos);
  }
}

}  // namespace braid::testing
