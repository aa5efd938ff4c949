// Algorithm trials end to end: ranks as processes run the first calls of three collectives
// through both of their two allowed algorithms (BRAID_TUNE=2 and BRAID_ALGO in BUILD make every
// call a trial, whatever the host's cores), check every call's data against a closed form, and
// log what they ran. The test then reads every rank's log: each key ran the schedule of
// algorithms/algorithm_trials.h (pick, runner-up, runner-up, pick; 16 calls each), every rank
// settled on the same algorithm, and every later call ran that one.
#include <dirent.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "core/logging.h"
#include "tests/harness/multi_rank.h"

namespace braid::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kBlockCalls = 16;              // TrialOptions' default
constexpr int kTrialCalls = 4 * kBlockCalls;
constexpr int kCallsAfter = 5;               // calls after the verdict
constexpr size_t kCount = 1031;

// Rank r's input element i in call c: small integers, so sums are exact in every type used.
int64_t Input(int rank, int call, size_t i) { return (rank + 1) * (call % 7 + 1) + static_cast<int64_t>(i % 100); }
int64_t SumOfInputs(int call, size_t i) {
  int64_t sum = 0;
  for (int r = 0; r < kRanks; ++r) sum += Input(r, call, i);
  return sum;
}

std::string LogDirectory() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/trial-logs-" + std::to_string(getpid());
}

template <typename T>
std::string Mismatch(const char* what, int call, const std::vector<T>& got, int64_t (*want)(int, size_t)) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<int64_t>(got[i]) != want(call, i)) {
      return std::string(what) + " call " + std::to_string(call) + " element " +
             std::to_string(i) + ": " + std::to_string(static_cast<double>(got[i])) +
             ", expected " + std::to_string(want(call, i));
    }
  }
  return "";
}

constexpr int kBroadcastRoot = 1;
constexpr int kReduceRoot = 2;
int64_t RootInput(int call, size_t i) { return Input(kBroadcastRoot, call, i); }

std::string TrialRank(int rank, int size, const braidUniqueId& id, const std::string& log_dir) {
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_FILE", (log_dir + "/rank-%p.log").c_str(), 1);
  ReloadLogSettings();
  braidComm_t comm = nullptr;
  if (braidCommInitRank(&comm, size, id, rank) != braidSuccess) {
    return std::string("init: ") + braidGetLastError(nullptr);
  }
  std::string failure;
  for (int call = 0; call < kTrialCalls + kCallsAfter && failure.empty(); ++call) {
    std::vector<float> broadcast(kCount, -1.0f);
    if (rank == kBroadcastRoot) {
      for (size_t i = 0; i < kCount; ++i) broadcast[i] = static_cast<float>(Input(rank, call, i));
    }
    std::vector<int32_t> reduce_in(kCount), reduce_out(kCount, -1);
    std::vector<double> allreduce_in(kCount), allreduce_out(kCount, -1);
    for (size_t i = 0; i < kCount; ++i) {
      reduce_in[i] = static_cast<int32_t>(Input(rank, call, i));
      allreduce_in[i] = static_cast<double>(Input(rank, call, i));
    }
    if (braidBroadcast(broadcast.data(), broadcast.data(), kCount, braidFloat32, kBroadcastRoot,
                       comm, nullptr) != braidSuccess ||
        braidReduce(reduce_in.data(), reduce_out.data(), kCount, braidInt32, braidSum, kReduceRoot,
                    comm, nullptr) != braidSuccess ||
        braidAllReduce(allreduce_in.data(), allreduce_out.data(), kCount, braidFloat64, braidSum,
                       comm, nullptr) != braidSuccess) {
      failure = "call " + std::to_string(call) + ": " + braidGetLastError(comm);
      break;
    }
    failure = Mismatch("broadcast", call, broadcast, RootInput);
    if (failure.empty() && rank == kReduceRoot) failure = Mismatch("reduce", call, reduce_out, SumOfInputs);
    if (failure.empty()) failure = Mismatch("allreduce", call, allreduce_out, SumOfInputs);
  }
  braidCommDestroy(comm);
  return failure;
}

// Every rank's log, one string each.
std::vector<std::string> ReadLogs(const std::string& dir) {
  std::vector<std::string> logs;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return logs;
  while (dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name.rfind("rank-", 0) != 0) continue;
    std::ifstream in(dir + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    logs.push_back(text.str());
  }
  closedir(d);
  return logs;
}

struct Calls {
  std::vector<std::string> trial;   // algorithms of the calls logged "(trial)", in order
  std::vector<std::string> later;   // algorithms of the calls after them
  std::string winner, loser;        // from the "trial settled" line
};

Calls CallsOf(const std::string& log, const std::string& collective) {
  Calls calls;
  // " reduce ..." and not "allreduce": the collective's name follows the level.
  const std::regex call("INFO " + collective + R"( #\d+ count \d+ .* ranks: algorithm (\w+)( \(trial\))?)");
  const std::regex settled("INFO " + collective + R"( count .* ranks: trial settled on (\w+) over (\w+))");
  std::istringstream lines(log);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, call)) {
      (m[2].matched ? calls.trial : calls.later).push_back(m[1]);
    } else if (std::regex_search(line, m, settled)) {
      calls.winner = m[1];
      calls.loser = m[2];
    }
  }
  return calls;
}

}  // namespace

TEST_CASE("trials: every call is right, every rank tries the same schedule and settles alike",
          "[trials]") {
  const std::string dir = LogDirectory();
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  const auto results =
      RunProcesses(kRanks, [&](int rank, int size) { return TrialRank(rank, size, id, dir); }, 300000);
  INFO(Failures(results));
  REQUIRE(Failures(results).empty());

  const std::vector<std::string> logs = ReadLogs(dir);
  REQUIRE(logs.size() == kRanks);
  for (const std::string collective : {"broadcast", "reduce", "allreduce"}) {
    CAPTURE(collective);
    std::string agreed;
    for (const std::string& log : logs) {
      const Calls calls = CallsOf(log, collective);
      REQUIRE(calls.trial.size() == kTrialCalls);
      const std::string pick = calls.trial.front();
      std::string runner_up;
      for (int i = 0; i < kTrialCalls; ++i) {
        CAPTURE(i);
        const bool pick_block = i < kBlockCalls || i >= 3 * kBlockCalls;
        if (pick_block) {
          CHECK(calls.trial[i] == pick);
        } else {
          if (runner_up.empty()) runner_up = calls.trial[i];
          CHECK(calls.trial[i] == runner_up);
        }
      }
      CHECK(runner_up != pick);
      REQUIRE_FALSE(calls.winner.empty());
      CHECK(((calls.winner == pick && calls.loser == runner_up) ||
             (calls.winner == runner_up && calls.loser == pick)));
      CHECK(calls.later == std::vector<std::string>(kCallsAfter, calls.winner));
      if (agreed.empty()) agreed = calls.winner;
      CHECK(calls.winner == agreed);
    }
  }
  REQUIRE(system(("rm -rf '" + dir + "'").c_str()) == 0);
}

}  // namespace braid::testing
