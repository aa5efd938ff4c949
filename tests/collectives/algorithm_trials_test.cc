// Algorithm trials end to end: ranks as processes run three collectives through both of their two
// allowed algorithms (BRAID_TUNE=2 and BRAID_ALGO in BUILD make every call a trial, whatever the
// host's cores), check every call's data against a closed form, and log what they ran. The test
// then reads every rank's log: each key ran rounds of the schedule of
// algorithms/algorithm_trials.h (pick, runner-up, runner-up, pick; blocks of 16 calls, then 4x
// longer each round), every rank ran as many rounds and settled on the same algorithm, and every
// later call ran that one.
#include <dirent.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/algorithm_trials.h"
#include "bindings/c/braid.h"
#include "core/base/logging.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

constexpr int kRanks = 4;
constexpr size_t kCount = 1031;

// The longest a trial can take with the default options: rounds up to the largest block.
int LongestTrial() {
  const algorithms::TrialOptions options;
  int calls = 0;
  for (int block = options.first_block_calls; block <= options.max_block_calls;
       block *= options.growth) {
    calls += 4 * block;
  }
  return calls;
}
const int kCalls = LongestTrial() + 5;  // at least 5 calls after every verdict

// Rank r's input element i in call c: small integers, so sums are exact in every type used.
int64_t Input(int rank, int call, size_t i) {
  return (rank + 1) * (call % 7 + 1) + static_cast<int64_t>(i % 100);
}
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
std::string Mismatch(const char* what, int call, const std::vector<T>& got,
                     int64_t (*want)(int, size_t)) {
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

// Before the rank's communicator exists: its process logs INFO lines to a file of its own.
std::string LogToDirectory(const std::string& log_dir) {
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_FILE", (log_dir + "/rank-%p.log").c_str(), 1);
  ReloadLogSettings();
  return "";
}

std::string TrialRank(braidComm_t comm, int rank) {
  std::string failure;
  for (int call = 0; call < kCalls && failure.empty(); ++call) {
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
    if (failure.empty() && rank == kReduceRoot) {
      failure = Mismatch("reduce", call, reduce_out, SumOfInputs);
    }
    if (failure.empty()) failure = Mismatch("allreduce", call, allreduce_out, SumOfInputs);
  }
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

struct Round {
  int block_calls = 0;
  std::string outcome;  // "settled on NAME" or "another round, ..."
};
struct Calls {
  std::vector<std::string> trial;  // algorithms of the calls logged "(trial)", in order
  std::vector<std::string> later;  // algorithms of the calls after them
  std::vector<Round> rounds;       // from the TUNING lines
};

Calls CallsOf(const std::string& log, const std::string& collective) {
  Calls calls;
  // " reduce ..." and not "allreduce": the collective's name follows the level.
  const std::regex call("INFO " + collective +
                        R"( #\d+ count \d+ .* ranks: algorithm (\w+)( \(trial\))?)");
  const std::regex round("INFO " + collective +
                         R"( count .* ranks: trial of \w+ against \w+, )"
                         R"(blocks of (\d+) calls, .* us: (.*)$)");
  std::istringstream lines(log);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, call)) {
      (m[2].matched ? calls.trial : calls.later).push_back(m[1]);
    } else if (std::regex_search(line, m, round)) {
      calls.rounds.push_back(Round{std::stoi(m[1]), m[2]});
    }
  }
  return calls;
}

}  // namespace

TEST_CASE("trials: every call is right, every rank runs the same rounds and settles alike",
          "[trials]") {
  const std::string dir = LogDirectory();
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  CommJob job;
  job.size = kRanks;
  job.ranks = Ranks::kProcesses;
  job.timeout_ms = 300000;
  job.before_init = [&](int, int) { return LogToDirectory(dir); };
  const auto results =
      RunComms(job, [&](braidComm_t comm, int rank, int) { return TrialRank(comm, rank); });
  INFO(Failures(results));
  REQUIRE(Failures(results).empty());

  const std::vector<std::string> logs = ReadLogs(dir);
  REQUIRE(logs.size() == kRanks);
  const algorithms::TrialOptions options;
  for (const std::string collective : {"broadcast", "reduce", "allreduce"}) {
    CAPTURE(collective);
    std::string agreed_winner;
    size_t agreed_rounds = 0;
    for (const std::string& log : logs) {
      const Calls calls = CallsOf(log, collective);
      REQUIRE_FALSE(calls.rounds.empty());
      REQUIRE_FALSE(calls.trial.empty());
      const std::string pick = calls.trial.front();
      std::string runner_up;
      size_t first = 0;  // the round's first trial call
      int block = options.first_block_calls;
      for (size_t r = 0; r < calls.rounds.size(); ++r) {
        CAPTURE(r);
        REQUIRE(calls.rounds[r].block_calls == block);
        REQUIRE(first + 4 * block <= calls.trial.size());
        for (int i = 0; i < 4 * block; ++i) {
          const std::string& ran = calls.trial[first + i];
          if (i < block || i >= 3 * block) {
            CHECK(ran == pick);
          } else {
            if (runner_up.empty()) runner_up = ran;
            CHECK(ran == runner_up);
          }
        }
        first += 4 * block;
        const bool last = r + 1 == calls.rounds.size();
        CHECK((calls.rounds[r].outcome.rfind("settled on ", 0) == 0) == last);
        block *= options.growth;
      }
      CHECK(first == calls.trial.size());
      CHECK(runner_up != pick);
      const std::string winner = calls.rounds.back().outcome.substr(11);
      CHECK((winner == pick || winner == runner_up));
      CHECK(calls.later.size() >= 5);
      CHECK(calls.later == std::vector<std::string>(calls.later.size(), winner));
      if (agreed_winner.empty()) {
        agreed_winner = winner;
        agreed_rounds = calls.rounds.size();
      }
      CHECK(winner == agreed_winner);
      CHECK(calls.rounds.size() == agreed_rounds);
    }
  }
  REQUIRE(system(("rm -rf '" + dir + "'").c_str()) == 0);
}

}  // namespace braid::testing
