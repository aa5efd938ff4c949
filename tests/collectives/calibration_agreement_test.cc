// Every rank of a communicator prices algorithms with rank 0's calibration, whatever file its own
// process read (core/calibration_agreement.h), and a split's children keep their parent's.
//
// Ranks are processes, each given its own BRAID_CALIBRATION before its first communicator and
// logging INFO lines to a file of its own. Two files are written so that they pick different
// allreduce algorithms for the same call; the selector itself confirms that here, with each
// file's model, so the test cannot pass because the files happen to agree. Ranks that priced with
// their own files would run different schedules, which the short deadline turns into a failure
// instead of a hang. From the logs the test checks that each rank read its own file, that every
// communicator's model carries rank 0's checksum on every rank, and that every rank ran the
// algorithm rank 0's file picks; the sums are checked against a closed form.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/calibration.h"
#include "algorithms/selector.h"
#include "bindings/c/braid.h"
#include "core/base/logging.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

constexpr int kRanks = 3;
// The parent's and the child's allreduce, told apart in the logs by their counts.
constexpr size_t kParentCount = 65536;
constexpr size_t kChildCount = 65537;
// Short enough that ranks running different schedules fail well inside the job.
constexpr int kDeadlineMs = 15000;
// The algorithms this test lets allreduce choose between (config.algo).
constexpr const char* kAlgo = "allreduce:rd,ring";

// Dear steps and a fast wire favour recursive doubling's few steps; free steps and a slow wire
// favour the ring's fewer bytes. Both variants of each step cost are stated, so the pick does not
// depend on whether the test host counts as oversubscribed.
const char* const kFewSteps =
    "version = 1\n"
    "tcp.latency_us = 100000\n"
    "tcp.latency_us_core_per_rank = 100000\n"
    "tcp.bandwidth_gbps = 100\n";
const char* const kFewBytes =
    "version = 1\n"
    "tcp.latency_us = 0\n"
    "tcp.latency_us_core_per_rank = 0\n"
    "tcp.bandwidth_gbps = 0.001\n";

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream out(path, std::ios::trunc);
  out << text;
  REQUIRE(out.good());
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

algorithms::Calibration MustParse(const std::string& path) {
  Result<algorithms::Calibration> parsed = algorithms::Calibration::Load(path);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return std::move(parsed).value();
}

// The allreduce algorithm `calibration` picks for `count` int32 on `nranks` ranks over TCP; the
// same whether or not ranks share cores (REQUIREd, so the expectations below hold on any host).
std::string Pick(const algorithms::Calibration& calibration, size_t count, int nranks) {
  const algorithms::AlgorithmPolicy policy = algorithms::AlgorithmPolicy::Parse(kAlgo).value();
  algorithms::CollectiveArgs args;
  args.kind = algorithms::Collective::kAllReduce;
  args.type = DataType::kInt32;
  args.op = ReduceOp::kSum;
  args.count = count;
  std::vector<std::string> picks;
  for (const auto& [oversubscribed, ranks_per_cpu] :
       std::vector<std::pair<bool, double>>{{false, 1}, {true, 1.5}, {true, 4}}) {
    Result<const algorithms::Algorithm*> chosen = algorithms::SelectAlgorithm(
        args, nranks, policy, calibration.Model("tcp", oversubscribed, ranks_per_cpu));
    REQUIRE(chosen.ok());
    picks.push_back(chosen.value()->name);
  }
  INFO(calibration.source() << " picks " << picks[0] << ", " << picks[1] << ", " << picks[2]);
  REQUIRE(picks[0] == picks[1]);
  REQUIRE(picks[0] == picks[2]);
  return picks[0];
}

// Rank r's input: small integers, so the sum is exact; the sum over every rank is closed form.
int32_t Input(int parent_rank, size_t i) {
  return (parent_rank + 1) * static_cast<int32_t>(i % 13 + 1);
}
int32_t Sum(size_t i) { return kRanks * (kRanks + 1) / 2 * static_cast<int32_t>(i % 13 + 1); }

// One allreduce of `count` int32 on `comm`, checked. `parent_rank` picks the input.
std::string AllReduceChecked(braidComm_t comm, int parent_rank, size_t count) {
  std::vector<int32_t> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = Input(parent_rank, i);
  BRAID_TRY(braidAllReduce(data.data(), data.data(), count, braidInt32, braidSum, comm, nullptr),
            "allreduce of " + std::to_string(count));
  for (size_t i = 0; i < count; ++i) {
    if (data[i] != Sum(i)) {
      return "allreduce of " + std::to_string(count) + ": element " + std::to_string(i) + " is " +
             std::to_string(data[i]) + ", expected " + std::to_string(Sum(i));
    }
  }
  return "";
}

// The lines of `text` that contain `needle`.
std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

// The algorithm a rank's COLL line names for the allreduce of `count` elements ("" if none).
std::string AlgorithmRun(const std::string& log, size_t count) {
  for (const std::string& line : LinesWith(log, "allreduce #")) {
    if (line.find(" count " + std::to_string(count) + " ") == std::string::npos) continue;
    const std::string marker = ": algorithm ";
    const size_t at = line.find(marker);
    if (at == std::string::npos) continue;
    std::istringstream rest(line.substr(at + marker.size()));
    std::string name;
    rest >> name;
    return name;
  }
  return "";
}

// Ranks as processes over TCP, rank r's process reading calibration[r] ("none": the built-in
// table) and logging to logs[r].
CommJob Job(const std::vector<std::string>& calibration, const std::vector<std::string>& logs) {
  CommJob job;
  job.size = kRanks;
  job.ranks = Ranks::kProcesses;
  job.config.transports = "tcp";
  job.config.algo = kAlgo;
  job.config.timeoutMs = kDeadlineMs;
  job.timeout_ms = 6 * kDeadlineMs;
  job.before_init = [calibration, logs](int rank, int) -> std::string {
    setenv("BRAID_CALIBRATION", calibration[rank].c_str(), 1);
    setenv("BRAID_DEBUG", "INFO", 1);
    setenv("BRAID_DEBUG_FILE", logs[rank].c_str(), 1);
    ReloadLogSettings();
    return "";
  };
  return job;
}

std::vector<std::string> LogPaths(const std::string& scenario) {
  std::vector<std::string> logs;
  for (int r = 0; r < kRanks; ++r) {
    logs.push_back(TempDir() + "/" + scenario + "-rank" + std::to_string(r) + ".log");
    std::remove(logs.back().c_str());
  }
  return logs;
}

// Every line in which a communicator states its model names `checksum`; returns how many there
// are.
size_t CheckModelsCarry(const std::string& log, const std::string& checksum) {
  const std::vector<std::string> models = LinesWith(log, "cost model: tcp");
  for (const std::string& line : models) {
    CAPTURE(line);
    CHECK(line.find("(checksum " + checksum + ")") != std::string::npos);
  }
  return models.size();
}

}  // namespace

TEST_CASE("ranks with different calibration files price with rank 0's, and so does a split",
          "[calibration]") {
  const std::string few_steps = WriteFile("few_steps.cal", kFewSteps);
  const std::string few_bytes = WriteFile("few_bytes.cal", kFewBytes);
  const algorithms::Calibration rank0 = MustParse(few_steps), others = MustParse(few_bytes);
  // The files disagree, for the parent's call and for the child's.
  const std::string expected = Pick(rank0, kParentCount, kRanks);
  REQUIRE(expected != Pick(others, kParentCount, kRanks));
  const std::string expected_child = Pick(rank0, kChildCount, kRanks);
  REQUIRE(expected_child != Pick(others, kChildCount, kRanks));

  // Rank 0 reads one file, ranks 1 and 2 the other. The child orders the ranks backwards, so its
  // rank 0 is the parent's rank 2, whose own file disagrees with the parent's rank 0.
  const std::vector<std::string> files = {few_steps, few_bytes, few_bytes};
  const std::vector<std::string> logs = LogPaths("split");
  CommJob job = Job(files, logs);
  const braidConfig_t child_config = job.config;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int size) -> std::string {
    std::string failure = AllReduceChecked(comm, rank, kParentCount);
    if (!failure.empty()) return failure;
    braidComm_t child = nullptr;
    braidConfig_t config = child_config;
    BRAID_TRY(braidCommSplit(comm, 0, size - rank, &child, &config), "split");
    failure = AllReduceChecked(child, rank, kChildCount);
    const braidResult_t destroyed = braidCommDestroy(child);
    if (failure.empty() && destroyed != braidSuccess) return "destroying the child failed";
    return failure;
  });
  INFO(Describe(job));
  BRAID_CHECK_RANKS(results);

  for (int r = 0; r < kRanks; ++r) {
    const std::string log = ReadFile(logs[r]);
    CAPTURE(r, log);
    const algorithms::Calibration own = MustParse(files[r]);
    // The rank read its own file: the agreement, not the environment, made them price alike.
    CHECK(log.find("cost model calibration: " + files[r] + " (checksum " + own.Fingerprint() +
                   ")") != std::string::npos);
    // Parent and child, each stating rank 0's numbers.
    CHECK(CheckModelsCarry(log, rank0.Fingerprint()) == 2);
    CHECK(AlgorithmRun(log, kParentCount) == expected);
    CHECK(AlgorithmRun(log, kChildCount) == expected_child);
  }
}

TEST_CASE("a rank 0 without a calibration file gives every rank the built-in table",
          "[calibration]") {
  const std::string few_steps = WriteFile("few_steps.cal", kFewSteps);
  const std::string few_bytes = WriteFile("few_bytes.cal", kFewBytes);
  // The two files disagree with each other, so at most one of them agrees with the built-in
  // table: without the agreement some rank would run another schedule.
  REQUIRE(Pick(MustParse(few_steps), kParentCount, kRanks) !=
          Pick(MustParse(few_bytes), kParentCount, kRanks));
  const std::vector<std::string> logs = LogPaths("none");
  CommJob job = Job({"none", few_steps, few_bytes}, logs);
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    return AllReduceChecked(comm, rank, kParentCount);
  });
  INFO(Describe(job));
  BRAID_CHECK_RANKS(results);

  const std::string built_in = algorithms::Calibration::BuiltIn().Fingerprint();
  std::vector<std::string> ran;
  for (int r = 0; r < kRanks; ++r) {
    const std::string log = ReadFile(logs[r]);
    CAPTURE(r, log);
    CHECK(log.find(r == 0 ? std::string("BRAID_CALIBRATION=none") : "cost model calibration: " +
                   (r == 1 ? few_steps : few_bytes) + " (checksum") != std::string::npos);
    CHECK(CheckModelsCarry(log, built_in) == 1);
    ran.push_back(AlgorithmRun(log, kParentCount));
  }
  CAPTURE(ran);
  CHECK(!ran[0].empty());
  CHECK(ran[1] == ran[0]);
  CHECK(ran[2] == ran[0]);
}

}  // namespace braid::testing
