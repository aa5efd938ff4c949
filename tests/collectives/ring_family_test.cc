// The ring family beyond the reference sweeps (tests/collectives/sweep_test.cc sweeps ring
// allgather, ring reduce-scatter and the chains over every transport): a chain reduce that times
// out names what it waited for, and the family's registration and cost functions.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace braid::testing {

// A rank that never joins: the waiting root times out within the deadline, and the error names the
// collective, its sequence number, the algorithm and the peer it was waiting for.
TEST_CASE("chain reduce timeout names collective, sequence and peer", "[reduce][errors]") {
  std::atomic<bool> done{false};
  CommJob job;
  job.config.timeoutMs = 1000;
  job.config.algo = "reduce:ring";
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    std::string failure;
    if (rank == 0) {
      std::vector<float> send(4096, 1.0f), recv(4096);
      braidResult_t rc = braidReduce(send.data(), recv.data(), send.size(), braidFloat32, braidSum,
                                     0, comm, nullptr);
      const std::string error = braidGetLastError(comm);
      done = true;
      if (rc == braidSuccess) failure = "reduce succeeded without rank 1";
      for (const char* part : {"reduce #0", "ring", "from rank 1"}) {
        if (failure.empty() && error.find(part) == std::string::npos) {
          failure = std::string("error does not mention \"") + part + "\": " + error;
        }
      }
    } else {
      // Rank 1 stays away from the reduce until rank 0 gave up (30 s at most).
      for (int i = 0; !done && i < 3000; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!done) failure = "rank 0 did not give up within 30 s";
    }
    return failure;
  });
  BRAID_CHECK_RANKS(results);
}

// The ring family is registered under "ring" for all four collectives, BRAID_ALGO can force it,
// and its cost functions behave: zero on one rank, growing with bytes and with latency.
TEST_CASE("ring family is registered and priced", "[registry]") {
  using algorithms::Collective;
  const Collective kinds[] = {Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kReduce};
  auto policy = algorithms::AlgorithmPolicy::Parse("ring");
  REQUIRE(policy.ok());
  for (Collective kind : kinds) {
    CAPTURE(algorithms::CollectiveName(kind));
    const algorithms::Algorithm* ring = algorithms::FindAlgorithm(kind, "ring");
    REQUIRE(ring != nullptr);
    algorithms::LinkModel link;
    CHECK(ring->cost(link, 1, 1 << 20) == 0);
    for (int n : {2, 3, 8}) {
      const double small = ring->cost(link, n, 1024), large = ring->cost(link, n, 64 << 20);
      CHECK(std::isfinite(large));
      CHECK(small > 0);
      CHECK(large > small);
    }
    algorithms::CollectiveArgs args;
    args.kind = kind;
    args.count = 1 << 20;
    auto chosen = algorithms::SelectAlgorithm(args, 4, policy.value(), link);
    REQUIRE(chosen.ok());
    CHECK(chosen.value() == ring);
  }
}

}  // namespace braid::testing
