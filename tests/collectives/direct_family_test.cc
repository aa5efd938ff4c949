// All-to-all and barrier beyond the reference sweeps (tests/collectives/sweep_test.cc sweeps
// all-to-all, gather and scatter with every algorithm over every transport): an in-place
// all-to-all whose blocks exceed the staging budget, and a barrier that must hold every rank
// until all arrived, over each transport, ranks as threads and as processes.
#include <sys/mman.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/collectives/collective_checks.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

std::string Fail(braidComm_t comm, braidResult_t rc) {
  return std::string(braidGetErrorString(rc)) + ": " + braidGetLastError(comm);
}

// Each rank bumps iteration i's counter right before barrier i and reads it right after: a
// barrier that let a rank through early shows a count below n. A rotating straggler sleeps
// before arriving so early leavers have time to be seen.
std::string BarrierRounds(braidComm_t comm, int rank, int n, std::atomic<int>* counters,
                          int iterations) {
  for (int i = 0; i < iterations; ++i) {
    if (i % 10 == 0 && rank == (i / 10) % n)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    counters[i].fetch_add(1);
    braidResult_t rc = braidBarrier(comm, nullptr);
    if (rc != braidSuccess) return "barrier " + std::to_string(i) + ": " + Fail(comm, rc);
    if (int seen = counters[i].load(); seen != n) {
      return "left barrier " + std::to_string(i) + " after only " + std::to_string(seen) + " of " +
             std::to_string(n) + " ranks arrived";
    }
  }
  return "";
}

}  // namespace

TEST_CASE("alltoall in place with blocks larger than the staging budget", "[alltoall]") {
  // 4 ranks × 3 MiB + 1 blocks with a 64 KiB chunk: 49 slices, the last one a single byte.
  CommJob job;
  job.size = 4;
  job.config.chunkBytes = 64 * 1024;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) {
    Call call;
    call.coll = Coll::kAllToAll;
    call.type = braidUint8;
    call.count = (size_t{3} << 20) + 1;
    call.in_place = true;
    return RunAndCheck(comm, rank, n, call);
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("barrier holds every rank until all arrived, ranks as threads", "[barrier][threads]") {
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  const int size = GENERATE(1, 2, 3, 4, 5, 8);
  constexpr int kIterations = 300;
  std::vector<std::atomic<int>> counters(kIterations);
  CommJob job;
  job.size = size;
  job.config.transports = transports;
  CAPTURE(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) {
    return BarrierRounds(comm, rank, n, counters.data(), kIterations);
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("barrier holds every rank until all arrived, ranks as processes",
          "[barrier][processes]") {
  const int size = GENERATE(3, 5);
  constexpr int kIterations = 200;
  // Counters in memory shared across fork().
  void* shared = mmap(nullptr, kIterations * sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* counters = new (shared) std::atomic<int>[kIterations]();
  CommJob job;
  job.size = size;
  job.ranks = Ranks::kProcesses;
  CAPTURE(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) {
    return BarrierRounds(comm, rank, n, counters, kIterations);
  });
  munmap(shared, kIterations * sizeof(std::atomic<int>));
  BRAID_CHECK_RANKS(results);
}

}  // namespace braid::testing
