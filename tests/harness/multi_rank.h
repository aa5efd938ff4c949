// Runs one function as every rank of a job: as threads of this process, or as forked processes.
//
// The body returns "" on success or a description of the first thing that went wrong; the
// harness collects one string per rank so the test's main thread makes the Catch2 assertions
// (Catch2 v2 is not thread-safe, and a forked child must not report to Catch2 at all).
//
// Nothing here waits forever: a rank still running at the job's deadline is named in its result
// ("did not finish within N ms"), so a hang fails the test at once instead of running into
// Bazel's limit. tests/harness/communicator.h builds the usual job on this: a fresh unique id,
// one communicator per rank, and braidCommAbort for ranks that hang.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace braid::testing {

using RankBody = std::function<std::string(int rank, int size)>;

// Called on the main thread, once, with the ranks still running at the deadline; it should wake
// them (tests/harness/communicator.h aborts their communicators).
using WakeRanks = std::function<void(const std::vector<int>& stuck)>;

// The deadline jobs get when the test names none: well inside Bazel's (600 s in .bazelrc).
constexpr int kDefaultJobTimeoutMs = 240000;
// How long ranks woken by WakeRanks get to return.
constexpr int kWakeGraceMs = 15000;

// One thread per rank. Returns each rank's result. A rank still running after `timeout_ms` gets
// "did not finish within N ms" (followed by what it returned once woken). A thread cannot be
// killed, and returning would leave it running over the caller's stack: if a rank is still running
// `wake_grace_ms` after `wake` (or without one), the process writes the stuck ranks to stderr and
// exits with status 1, which fails the test naming them.
std::vector<std::string> RunThreads(int size, const RankBody& body,
                                    int timeout_ms = kDefaultJobTimeoutMs,
                                    const WakeRanks& wake = nullptr,
                                    int wake_grace_ms = kWakeGraceMs);

// One forked process per rank; results travel back through pipes. A child that crashes, exits
// without reporting, or outlives `timeout_ms` (it is killed) yields a failure string naming its
// rank.
std::vector<std::string> RunProcesses(int size, const RankBody& body,
                                      int timeout_ms = kDefaultJobTimeoutMs);

// "" if every entry is empty, else "rank R: message" lines for the failing ranks.
std::string Failures(const std::vector<std::string>& results);

}  // namespace braid::testing
