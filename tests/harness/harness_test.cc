// The multi-rank harness itself: each rank gets its own communicator, and a hang fails the job
// naming the stuck ranks instead of running into Bazel's limit (as threads: aborted, or the
// process exits naming them; as processes: killed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/communicator.h"
#include "tests/harness/multi_rank.h"

namespace braid::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Both ranks wait for a message the other never sends; braid's own deadline is far away.
std::string DeadlockedPair(braidComm_t comm, int rank, int) {
  int value = 0;
  braidResult_t rc = braidRecv(&value, 1, braidInt32, 1 - rank, comm, nullptr);
  return std::string("recv returned ") + braidGetErrorString(rc);
}

}  // namespace

TEST_CASE("each rank gets a communicator of the job's size and its own rank", "[harness]") {
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  CommJob job;
  job.size = 3;
  job.ranks = ranks;
  CAPTURE(Describe(job));
  auto results = RunComms(job, [](braidComm_t comm, int rank, int size) -> std::string {
    int got_rank = -1, got_size = -1;
    if (braidCommUserRank(comm, &got_rank) != braidSuccess) return "braidCommUserRank failed";
    if (braidCommCount(comm, &got_size) != braidSuccess) return "braidCommCount failed";
    if (got_rank != rank || got_size != size) {
      return "communicator says rank " + std::to_string(got_rank) + " of " +
             std::to_string(got_size);
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("several communicators per rank, from the job's ids, set up in order", "[harness]") {
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  CommJob job;
  job.size = 3;
  job.ranks = ranks;
  job.ids = NewIds(3);
  // Each rank writes down which inits it was called before; the body reads that back.
  std::vector<std::string> order(job.size);
  job.before_init = [&](int rank, int index) -> std::string {
    order[rank] += std::to_string(index);
    return "";
  };
  CAPTURE(Describe(job));
  auto results = RunCommSets(job, [&](const std::vector<braidComm_t>& comms, int rank,
                                      int size) -> std::string {
    if (comms.size() != 3) return "got " + std::to_string(comms.size()) + " communicators";
    if (order[rank] != "012") return "before_init ran for " + order[rank];
    // Independent communicators: a different sum on each, run from the last to the first.
    for (int i = 2; i >= 0; --i) {
      braidComm_t comm = comms[i];
      int64_t value = (rank + 1) * (i + 1);
      BRAID_TRY(braidAllReduce(&value, &value, 1, braidInt64, braidSum, comm, nullptr),
                "allreduce on communicator " + std::to_string(i));
      const int64_t expected = (i + 1) * size * (size + 1) / 2;
      if (value != expected) {
        return "communicator " + std::to_string(i) + " summed " + std::to_string(value) +
               ", expected " + std::to_string(expected);
      }
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a failing before_init is the rank's result; no communicator is made", "[harness]") {
  CommJob job;
  job.ids = NewIds(2);
  job.config.timeoutMs = 1500;  // rank 0 then waits for rank 1 at the second init
  job.before_init = [](int rank, int index) -> std::string {
    return rank == 1 && index == 1 ? "not ready" : "";
  };
  bool ran = false;
  auto results = RunCommSets(job, [&](const std::vector<braidComm_t>&, int, int) {
    ran = true;
    return std::string();
  });
  CHECK_FALSE(ran);
  CHECK(results[1] == "not ready");
  CHECK(Contains(results[0], "init failed (communicator 1 of 2): "));
}

TEST_CASE("the body may own its communicator; otherwise a failed destroy is reported",
          "[harness]") {
  CommJob job;
  SECTION("body_destroys: the body's destroy is the only one") {
    job.body_destroys = true;
    auto results = RunComms(job, [](braidComm_t comm, int, int) -> std::string {
      BRAID_TRY(braidCommDestroy(comm), "destroy in the body");
      return "";
    });
    BRAID_CHECK_RANKS(results);
  }
  SECTION("without it, a body that destroys its communicator is told the fixture could not") {
    auto results = RunComms(job, [](braidComm_t comm, int, int) -> std::string {
      BRAID_TRY(braidCommDestroy(comm), "destroy in the body");
      return "";
    });
    for (const std::string& result : results) {
      CAPTURE(result);
      CHECK(Contains(result, "destroy: "));
      CHECK(Contains(result, "live communicator"));
    }
  }
}

TEST_CASE("a rank's result carries the signal that killed its process", "[harness]") {
  CommJob job;
  job.size = 3;
  job.ranks = Ranks::kProcesses;
  auto results = RunComms(job, [](braidComm_t, int rank, int) -> std::string {
    if (rank == 1) raise(SIGKILL);
    return "";
  });
  CHECK(results[0].empty());
  CHECK(results[1] == "killed by signal 9");
  CHECK(results[2].empty());
}

TEST_CASE("a one-rank communicator for the main thread", "[harness]") {
  braidComm_t comm = OneRankComm();
  int size = 0;
  CHECK(braidCommCount(comm, &size) == braidSuccess);
  CHECK(size == 1);
  float x = 3;
  CHECK(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) == braidSuccess);
  CHECK(x == 3.0f);
  CHECK(braidCommDestroy(comm) == braidSuccess);
}

TEST_CASE("a job's failures name each failing rank", "[harness]") {
  auto results = RunThreads(3, [](int rank, int) -> std::string {
    return rank == 1 ? "it broke" : "";
  });
  CHECK(Failures(results) == "rank 1: it broke\n");
}

TEST_CASE("threads stuck in braid past the job's deadline are aborted and named", "[harness]") {
  CommJob job;
  job.config.timeoutMs = 600000;
  job.timeout_ms = 1500;
  const auto start = std::chrono::steady_clock::now();
  auto results = RunComms(job, DeadlockedPair);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(results.size() == 2);
  for (const std::string& result : results) {
    CAPTURE(result);
    CHECK(Contains(result, "did not finish within 1500 ms"));
    CHECK(Contains(result, "woken"));
  }
  CHECK(Contains(Failures(results), "rank 0: "));
  CHECK(Contains(Failures(results), "rank 1: "));
  CHECK(seconds < 30);
}

TEST_CASE("processes stuck past the job's deadline are killed and named", "[harness]") {
  CommJob job;
  job.ranks = Ranks::kProcesses;
  job.config.timeoutMs = 600000;
  job.timeout_ms = 1500;
  auto results = RunComms(job, DeadlockedPair);
  REQUIRE(results.size() == 2);
  for (const std::string& result : results) {
    CAPTURE(result);
    CHECK(Contains(result, "did not finish within 1500 ms (killed)"));
  }
}

TEST_CASE("a thread that cannot be woken ends the process, naming its rank", "[harness]") {
  // In a child, so the exit it must cause does not end this test binary.
  int err_pipe[2];
  REQUIRE(pipe(err_pipe) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(err_pipe[1], STDERR_FILENO);
    close(err_pipe[0]);
    RunThreads(
        3,
        [](int rank, int) -> std::string {
          if (rank == 2) std::this_thread::sleep_for(std::chrono::seconds(60));
          return "";
        },
        200, [](const std::vector<int>&) {}, 200);
    _exit(0);  // not reached when the harness does its job
  }
  close(err_pipe[1]);
  std::string err;
  char buffer[256];
  for (ssize_t n; (n = read(err_pipe[0], buffer, sizeof(buffer))) > 0;) err.append(buffer, n);
  close(err_pipe[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CAPTURE(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(Contains(err, "rank(s) 2 of 3 did not finish within 200 ms"));
}

}  // namespace braid::testing
