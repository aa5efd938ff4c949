// A collective that times out names who is missing: ranks that are idle elsewhere (with the last
// collective they entered) and ranks that do not answer at all (a frozen process).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "bindings/c/braid.h"
#include "tests/harness/multi_rank.h"

namespace {

using braid::testing::Failures;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Rank `late` joins the first allreduce only; the others enter a second one and time out.
std::string RunWithLateRank(const braidUniqueId& id, int rank, int size, int late, bool freeze) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = 1500;
  braidComm_t comm = nullptr;
  if (braidCommInitRankConfig(&comm, size, id, rank, &config) != braidSuccess) {
    return std::string("init: ") + braidGetLastError(nullptr);
  }
  float x = 1;
  if (braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) != braidSuccess) {
    return std::string("first allreduce: ") + braidGetLastError(comm);
  }
  if (rank == late) {
    if (freeze) raise(SIGSTOP);  // frozen until the harness kills it
    std::this_thread::sleep_for(std::chrono::seconds(4));  // "busy in user code"
    braidCommDestroy(comm);
    return "";
  }
  braidResult_t rc = braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr);
  std::string message = braidGetLastError(comm);
  if (rc != braidTimeout) return "expected braidTimeout, got " + std::to_string(rc) + ": " + message;
  return "MESSAGE:" + message;
}

}  // namespace

TEST_CASE("a timed-out allreduce names the idle rank and its last collective", "[faults][timeout]") {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto results = braid::testing::RunThreads(3, [&](int rank, int size) {
    return RunWithLateRank(id, rank, size, 2, false);
  });
  CHECK(results[2].empty());
  for (int rank : {0, 1}) {
    INFO("rank " << rank << ": " << results[rank]);
    REQUIRE(results[rank].rfind("MESSAGE:", 0) == 0);
    CHECK(Has(results[rank], "had not reached allreduce #1"));
    CHECK(Has(results[rank], "rank 2 (idle; last entered allreduce #0 (4 bytes))"));
    // Either this rank diagnosed while the other waiting rank was still inside the collective, or
    // the other timed out first and its diagnosis (naming the same idle rank) is reported.
    const std::string other = std::to_string(1 - rank);
    CHECK((Has(results[rank], "ranks that reached allreduce #1: " + other) ||
           Has(results[rank], "rank " + other + " failed first:")));
  }
}

TEST_CASE("a timed-out allreduce names a frozen process as not answering", "[faults][timeout]") {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto results = braid::testing::RunProcesses(
      3, [&](int rank, int size) { return RunWithLateRank(id, rank, size, 1, true); }, 9000);
  CHECK(Has(results[1], "did not finish"));  // the frozen rank, killed by the harness
  for (int rank : {0, 2}) {
    INFO("rank " << rank << ": " << results[rank]);
    REQUIRE(results[rank].rfind("MESSAGE:", 0) == 0);
    CHECK(Has(results[rank], "did not answer (process gone or frozen?): 1"));
  }
}
