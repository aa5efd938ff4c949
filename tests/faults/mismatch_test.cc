// BRAID_CHECK (config.checkMode = 1): ranks that disagree about a collective's arguments get
// braidInvalidUsage naming the other rank and both calls, instead of a hang or mixed data; the
// communicator stays usable afterwards.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace {

using Call = std::function<braidResult_t(int rank, braidComm_t comm, float* buffer)>;

struct Outcome {
  braidResult_t rc;
  std::string message;
  bool usable_after;
};

std::vector<Outcome> RunMismatch(const Call& call) {
  braid::testing::CommJob job;
  job.size = 3;
  job.config.checkMode = 1;
  job.config.timeoutMs = 20000;
  std::vector<Outcome> outcomes(job.size);
  auto results = braid::testing::RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    std::vector<float> buffer(64, 1.0f);
    outcomes[rank].rc = call(rank, comm, buffer.data());
    outcomes[rank].message = braidGetLastError(comm);
    float x = 1;
    outcomes[rank].usable_after =
        braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) == braidSuccess && x == 3.0f;
    return "";
  });
  INFO(braid::testing::Failures(results));
  REQUIRE(braid::testing::Failures(results).empty());
  return outcomes;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("matching calls pass the check", "[faults][check]") {
  auto outcomes = RunMismatch([](int, braidComm_t comm, float* b) {
    return braidAllReduce(b, b, 64, braidFloat32, braidMax, comm, nullptr);
  });
  for (const Outcome& o : outcomes) {
    CHECK(o.rc == braidSuccess);
    CHECK(o.usable_after);
  }
}

TEST_CASE("a count mismatch names the rank and both calls", "[faults][check]") {
  auto outcomes = RunMismatch([](int rank, braidComm_t comm, float* b) {
    return braidAllReduce(b, b, rank == 2 ? 32 : 64, braidFloat32, braidSum, comm, nullptr);
  });
  for (int rank : {0, 1}) {
    INFO(outcomes[rank].message);
    CHECK(outcomes[rank].rc == braidInvalidUsage);
    CHECK(Has(outcomes[rank].message, "this rank called allreduce(count 64, float, sum), rank 2 called allreduce(count 32, float, sum)"));
  }
  INFO(outcomes[2].message);
  CHECK(outcomes[2].rc == braidInvalidUsage);
  CHECK(Has(outcomes[2].message, "this rank called allreduce(count 32, float, sum), rank 0 called allreduce(count 64, float, sum)"));
  for (const Outcome& o : outcomes) CHECK(o.usable_after);
}

TEST_CASE("op, datatype, root and collective mismatches are caught", "[faults][check]") {
  SECTION("op") {
    auto outcomes = RunMismatch([](int rank, braidComm_t comm, float* b) {
      return braidAllReduce(b, b, 8, braidFloat32, rank == 1 ? braidMin : braidSum, comm, nullptr);
    });
    INFO(outcomes[0].message);
    CHECK(Has(outcomes[0].message, "rank 1 called allreduce(count 8, float, min)"));
  }
  SECTION("datatype") {
    auto outcomes = RunMismatch([](int rank, braidComm_t comm, float* b) {
      return braidAllReduce(b, b, 8, rank == 1 ? braidInt32 : braidFloat32, braidSum, comm, nullptr);
    });
    INFO(outcomes[0].message);
    CHECK(Has(outcomes[0].message, "rank 1 called allreduce(count 8, int32, sum)"));
  }
  SECTION("root") {
    auto outcomes = RunMismatch([](int rank, braidComm_t comm, float* b) {
      return braidBroadcast(b, b, 8, braidFloat32, rank == 2 ? 1 : 0, comm, nullptr);
    });
    INFO(outcomes[0].message);
    CHECK(outcomes[0].rc == braidInvalidUsage);
    CHECK(Has(outcomes[0].message, "rank 2 called broadcast(count 8, float, root 1)"));
  }
  SECTION("different collectives") {
    auto outcomes = RunMismatch([](int rank, braidComm_t comm, float* b) {
      if (rank == 1) return braidReduce(b, b, 8, braidFloat32, braidSum, 0, comm, nullptr);
      return braidAllReduce(b, b, 8, braidFloat32, braidSum, comm, nullptr);
    });
    INFO(outcomes[1].message);
    CHECK(outcomes[1].rc == braidInvalidUsage);
    CHECK(Has(outcomes[1].message, "this rank called reduce(count 8, float, sum, root 0), rank 0 called allreduce(count 8, float, sum)"));
    for (const Outcome& o : outcomes) CHECK(o.usable_after);
  }
}
