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
//
// Less usual jobs, without a harness of their own:
//   - the test needs the unique id itself (to reach the job's store, hosted by this process):
//     job.ids = {NewId()}, then job.ids[0];
//   - each rank holds several communicators: job.ids = NewIds(n) and RunCommSets;
//   - per-rank setup before a communicator exists (environment, log files, lining ranks up
//     through the store before an init with a short deadline): job.before_init;
//   - a body that destroys its communicator itself (lifetime tests, checks made after the
//     destroy): job.body_destroys;
//   - a rank killed or frozen on purpose: as a process, its result says "killed by signal N";
//   - a test that makes its Catch2 assertions on a one-rank communicator from the main thread
//     (argument checks, misuse, destroy and abort semantics): OneRankComm().
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
// `n` fresh unique ids (NewId each).
std::vector<braidUniqueId> NewIds(int n);

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
  // The unique ids of the communicators each rank holds, one communicator per id, created in this
  // order on every rank. Empty (the usual case): one communicator from a fresh id (NewId). Set it
  // when the test needs the id itself (its store; a store census), or for several communicators
  // per rank (RunCommSets). The ids' stores live in this process, as NewId's do.
  std::vector<braidUniqueId> ids;
  // Runs on each rank (its thread, or its process) before communicator `index` (of `ids`) is
  // created: per-process setup such as environment and log settings, or lining the ranks up
  // through the job's store so that a short config.timeoutMs has to cover the init only. "" goes
  // on; anything else is the rank's result, and its communicators made so far are destroyed.
  std::function<std::string(int rank, int index)> before_init;
  // false (the usual case): after the body the fixture destroys the rank's communicators, and a
  // destroy that fails becomes the rank's result if the body succeeded. true: the body owns them
  // and destroys each itself (tests of destruction order, or checks made after the destroy). A
  // thread rank stuck at the job's deadline still has its communicators aborted; braid refuses,
  // harmlessly, an abort of one the body already destroyed.
  bool body_destroys = false;
};

// "4 ranks as threads, transports tcp, algo allreduce:ring, chunk 4096" (the fields set).
std::string Describe(const CommJob& job);

using CommBody = std::function<std::string(braidComm_t comm, int rank, int size)>;

// Runs `body` on every rank of `job` with that rank's communicator (created from a fresh unique
// id, or job.ids[0]; destroyed after the body returns unless job.body_destroys). A rank whose
// creation fails reports "init failed: ..." and skips the body. Returns one result per rank
// ("" = success). Call from the main thread. job.ids holds at most one id here.
std::vector<std::string> RunComms(const CommJob& job, const CommBody& body);

// comms[i] is this rank's communicator from job.ids[i] (or, with job.ids empty, the one from a
// fresh id).
using CommSetBody =
    std::function<std::string(const std::vector<braidComm_t>& comms, int rank, int size)>;

// RunComms for ranks that hold several communicators at once: every rank creates one per id of
// job.ids, in order (creation failing names the communicator: "init failed (communicator i of
// n): ..."), runs `body` with all of them, and destroys them as RunComms does. A thread rank
// stuck at the job's deadline has every one of them aborted.
std::vector<std::string> RunCommSets(const CommJob& job, const CommSetBody& body);

// A one-rank communicator (fresh unique id, config.timeoutMs kOperationTimeoutMs) for a test that
// makes its Catch2 assertions on it from the main thread: argument checks, queries, misuse,
// destroy and abort semantics. No other rank exists, so nothing can wait on a peer. The caller
// destroys it (or checks that it cannot). Main thread only: a failure is a REQUIRE.
braidComm_t OneRankComm();

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
