// BRAID_CHECK (config.checkMode = 1): ranks that disagree about a collective's arguments get
// braidInvalidUsage naming the other rank and both calls, instead of a hang or mixed data; the
// communicator stays usable afterwards. Every rank's message leads with the odd rank out and its
// bad input (docs/FAILURES.md), the culprit's own included, at every position of tcp and shm x
// 3, 4 and 8 ranks.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/faults/message_reading.h"
#include "tests/harness/communicator.h"

namespace {

using Call = std::function<braidResult_t(int rank, braidComm_t comm, float* buffer)>;

struct Outcome {
  braidResult_t rc;
  std::string message;
  bool usable_after;
};

// Runs `call` on every rank of a job with BRAID_CHECK on (3 ranks as threads unless told).
std::vector<Outcome> RunMismatch(const Call& call, int size = 3, const char* transports = nullptr) {
  braid::testing::CommJob job;
  job.size = size;
  if (transports != nullptr) job.config.transports = transports;
  job.config.checkMode = 1;
  job.config.timeoutMs = 20000;
  std::vector<Outcome> outcomes(job.size);
  auto results = braid::testing::RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    std::vector<float> buffer(64, 1.0f);
    outcomes[rank].rc = call(rank, comm, buffer.data());
    outcomes[rank].message = braidGetLastError(comm);
    float x = 1;
    outcomes[rank].usable_after =
        braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) == braidSuccess &&
        x == static_cast<float>(job.size);
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

TEST_CASE("every rank names the odd rank out and its bad input first, at every position",
          "[faults][check][badinput]") {
  // One mismatch per position, rotated: what the culprit gets wrong, its call and the others'.
  struct Mistake {
    const char* what;
    std::function<braidResult_t(bool culprit, braidComm_t comm, float* b)> call;
    const char* culprit_call;
    const char* others_call;
  };
  const std::vector<Mistake> mistakes = {
      {"count", [](bool odd, braidComm_t comm, float* b) {
         return braidAllReduce(b, b, odd ? 32 : 64, braidFloat32, braidSum, comm, nullptr); },
       "allreduce(count 32, float, sum)", "allreduce(count 64, float, sum)"},
      {"datatype", [](bool odd, braidComm_t comm, float* b) {
         return braidAllReduce(b, b, 8, odd ? braidInt32 : braidFloat32, braidSum, comm, nullptr); },
       "allreduce(count 8, int32, sum)", "allreduce(count 8, float, sum)"},
      {"op", [](bool odd, braidComm_t comm, float* b) {
         return braidReduceScatter(b, b, 4, braidFloat32, odd ? braidMax : braidSum, comm, nullptr); },
       "reducescatter(count 4, float, max)", "reducescatter(count 4, float, sum)"},
      {"root", [](bool odd, braidComm_t comm, float* b) {
         return braidBroadcast(b, b, 8, braidFloat32, odd ? 1 : 0, comm, nullptr); },
       "broadcast(count 8, float, root 1)", "broadcast(count 8, float, root 0)"},
  };
  int turn = 0;
  for (const char* transports : {"tcp", "shm"}) {
    for (int size : {3, 4, 8}) {
      for (int culprit = 0; culprit < size; ++culprit, ++turn) {
        const Mistake& mistake = mistakes[turn % mistakes.size()];
        INFO(transports << ", " << size << " ranks, rank " << culprit << " passes another "
                        << mistake.what);
        auto outcomes = RunMismatch(
            [&](int rank, braidComm_t comm, float* b) { return mistake.call(rank == culprit, comm, b); },
            size, transports);
        const std::string culprit_lead = "rank " + std::to_string(culprit) +
                                         " failed on bad input at ";
        for (int rank = 0; rank < size; ++rank) {
          const Outcome& o = outcomes[rank];
          INFO("rank " << rank << ": " << o.message);
          CHECK(o.rc == braidInvalidUsage);
          CHECK(braid::testing::FirstRankNamed(o.message) == culprit);
          const std::string lead = braid::testing::Lead(o.message);
          CHECK(lead.rfind(culprit_lead, 0) == 0);
          CHECK(Has(lead, std::string("it called ") + mistake.culprit_call));
          CHECK(Has(lead, std::string(" called ") + mistake.others_call));
          CHECK(o.usable_after);
        }
      }
    }
  }
}
