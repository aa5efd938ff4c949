// The communicator fixture every multi-rank test uses: a fresh unique id, one communicator per
// rank (ranks as threads of this process or as forked processes), the body run on each, the
// communicators destroyed, and one result string per rank for the main thread to assert on.
//
//   CommJob job;                      // 2 ranks as threads, default config
//   job.size = 4;
//   job.config.transports = "tcp";    // any braidConfig_t field, algo included
//   auto results = RunComms(job, [&](braidComm_t comm, int rank, int size) -> std::string {
//     ...                             // "" on success, else what went wrong
//   });
//   BRAID_CHECK_RANKS(results);       // main thread only: fails naming each failing rank
//
// Nothing waits forever: every braid call has the config's deadline (job.config.timeoutMs,
// defaulting to kOperationTimeoutMs here rather than braid's 30 minutes), and the job has one of
// its own (job.timeout_ms). A rank still running at the job's deadline is named in its result; as
// a thread its communicator is aborted (braidCommAbort wakes every blocked call), as a process it
// is killed. Catch2 v2 is not thread-safe: bodies return strings and never call Catch2.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/multi_rank.h"

namespace braid::testing {

// A fresh unique id (rank 0's side of braidGetUniqueId: a store server in this process). Main
// thread only: a failure is a Catch2 REQUIRE.
braidUniqueId NewId();

enum class Ranks { kThreads, kProcesses };

// What config.timeoutMs becomes when the job leaves it undefined: long enough for a large
// collective with 8 ranks on 2 cores, short enough that a hang is reported well inside the job.
constexpr int kOperationTimeoutMs = 60000;

struct CommJob {
  int size = 2;
  Ranks ranks = Ranks::kThreads;
  // Passed to braidCommInitRankConfig on every rank. Strings it points to must outlive the job.
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  // The whole job, creation to destruction.
  int timeout_ms = kDefaultJobTimeoutMs;
};

// "4 ranks as threads, transports tcp, algo allreduce:ring, chunk 4096" (the fields set).
std::string Describe(const CommJob& job);

using CommBody = std::function<std::string(braidComm_t comm, int rank, int size)>;

// Runs `body` on every rank of `job` with that rank's communicator (created from a fresh unique
// id, destroyed after the body returns). A rank whose creation fails reports "init failed: ..."
// and skips the body. Returns one result per rank ("" = success). Call from the main thread.
std::vector<std::string> RunComms(const CommJob& job, const CommBody& body);

// A body's failure text for a braid call: "what: <result string>: <braidGetLastError(comm)>".
inline std::string CallFailure(braidComm_t comm, braidResult_t rc, const std::string& what) {
  return what + ": " + braidGetErrorString(rc) + ": " + braidGetLastError(comm);
}

}  // namespace braid::testing

// Inside a CommBody with `comm` in scope: returns the CallFailure of `call` unless it succeeds.
#define BRAID_TRY(call, what)                                                          \
  do {                                                                                 \
    braidResult_t braid_rc_ = (call);                                                  \
    if (braid_rc_ != braidSuccess) return ::braid::testing::CallFailure(comm, braid_rc_, what); \
  } while (0)

// Asserts that every rank succeeded; the failure message lists each failing rank's result.
#define BRAID_CHECK_RANKS(results)                                               \
  do {                                                                           \
    const std::string braid_failures_ = ::braid::testing::Failures(results);     \
    INFO(braid_failures_);                                                       \
    CHECK(braid_failures_.empty());                                              \
  } while (0)
