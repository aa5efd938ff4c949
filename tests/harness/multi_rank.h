// Runs one function as every rank of a job: as threads of this process, or as forked processes.
//
// The body returns "" on success or a description of the first thing that went wrong; the
// harness collects one string per rank so the test's main thread makes the Catch2 assertions
// (Catch2 v2 is not thread-safe, and a forked child must not report to Catch2 at all).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace braid::testing {

using RankBody = std::function<std::string(int rank, int size)>;

// One thread per rank. Returns each rank's result.
std::vector<std::string> RunThreads(int size, const RankBody& body);

// One forked process per rank; results travel back through pipes. A child that crashes, exits
// without reporting, or outlives `timeout_ms` yields a failure string naming its rank.
std::vector<std::string> RunProcesses(int size, const RankBody& body, int timeout_ms);

// "" if every entry is empty, else "rank R: message" lines for the failing ranks.
std::string Failures(const std::vector<std::string>& results);

}  // namespace braid::testing
