// Every collective, barrier and send/recv through braid.h over the verbs transport (forced with
// braidConfig_t::transports = "ibverbs"), its ranks in processes of their own at 2, 3 and 4
// ranks, checked against the serial oracles of tests/collectives/collective_checks.h. Counts
// reach past one ring slot (128 KiB) so large messages are chunked and pipelined.
//
// Two binaries from this source: verbs_collectives_test links install_verbs_model.cc, so the
// verbs calls go to the software model (bytes move between the processes through the model's
// RDMA writes, in chunks and credits as on a device) and the transport must come up;
// verbs_collectives_device_test (manual) runs on whatever device the host has and says it
// skipped, and why, where there is none. A last case kills a rank between two collectives.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/collectives/collective_checks.h"
#include "tests/harness/communicator.h"
#include "tests/transport/ibverbs/verbs_model.h"
#include "transport/ibverbs/device.h"
#include "transport/ibverbs/ib_config.h"
#include "transport/ibverbs/verbs_api.h"

namespace braid::testing {
namespace {

const std::vector<size_t> kCounts = {0, 1, 7, 1021, (size_t{1} << 17) + 3};

// "" when a verbs device (the model's, or a real one) can be opened here, else why not.
std::string WhyNoVerbs() {
  using namespace transport::ibverbs;
  Result<const VerbsApi*> api = ActiveVerbsApi();
  if (!api.ok()) return api.status().message();
  Result<IbConfig> config = IbConfigFromEnvironment();
  if (!config.ok()) return config.status().message();
  std::string why;
  Result<std::unique_ptr<VerbsDevice>> device =
      VerbsDevice::Open(*api.value(), config.value(), &why);
  if (!device.ok()) return device.status().message();
  return device.value() == nullptr ? why : "";
}

// Returns from the test case, saying why, where there is no device; over the model the device
// must be there.
#define SKIP_WITHOUT_VERBS()                                                 \
  do {                                                                       \
    const std::string why_no_verbs = WhyNoVerbs();                           \
    if (transport::ibverbs::UsingVerbsApiForTesting()) {                     \
      REQUIRE(why_no_verbs == "");                                           \
    } else if (!why_no_verbs.empty()) {                                      \
      WARN("SKIPPED, not run: no usable RDMA device: " << why_no_verbs);     \
      return;                                                                \
    }                                                                        \
  } while (0)

// Receiver-not-ready retries this rank met (the model counts them; a device does not tell).
uint64_t RnrNaks() {
  return transport::ibverbs::UsingVerbsApiForTesting() ? verbs_model::RnrNaks() : 0;
}

CommJob VerbsJob(int size) {
  CommJob job;
  job.size = size;
  job.ranks = Ranks::kProcesses;
  job.config.transports = "ibverbs";
  return job;
}

TEST_CASE("every collective over verbs, ranks in processes", "[verbs][collectives]") {
  SKIP_WITHOUT_VERBS();
  const int size = GENERATE(2, 3, 4);
  const Coll coll = GENERATE(Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather,
                             Coll::kReduceScatter, Coll::kAllToAll, Coll::kGather, Coll::kScatter);
  INFO(size << " ranks, " << CollName(coll));
  auto results = RunComms(VerbsJob(size), [&](braidComm_t comm, int rank, int n) -> std::string {
    for (size_t count : kCounts) {
      for (braidDataType_t type : {braidFloat32, braidInt32}) {
        Call call;
        call.coll = coll;
        call.type = type;
        call.op = type == braidInt32 ? braidMax : braidSum;
        call.count = count;
        call.root = n - 1;
        std::string failure = RunAndCheck(comm, rank, n, call);
        if (!failure.empty()) return failure;
        call.in_place = true;
        call.root = 0;
        failure = RunAndCheck(comm, rank, n, call);
        if (!failure.empty()) return failure;
      }
    }
    // Credits keep a receive posted for every write: no receiver-not-ready retries at all.
    if (RnrNaks() != 0) {
      return "rank " + std::to_string(rank) + " met " + std::to_string(RnrNaks()) +
             " receiver-not-ready retries";
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("barrier and a send/recv ring over verbs, ranks in processes", "[verbs][p2p]") {
  SKIP_WITHOUT_VERBS();
  const int size = GENERATE(2, 3, 4);
  auto results = RunComms(VerbsJob(size), [&](braidComm_t comm, int rank, int n) -> std::string {
    BRAID_TRY(braidBarrier(comm, nullptr), "barrier");
    // Each rank sends a block that names it to the next rank and receives the previous one's.
    const size_t count = (size_t{1} << 18) + 11;  // several ring slots: chunked and pipelined
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(rank * 1000003 + i);
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    BRAID_TRY(braidGroupStart(), "group start");
    BRAID_TRY(braidSend(out.data(), count, braidInt32, next, comm, nullptr), "send");
    BRAID_TRY(braidRecv(in.data(), count, braidInt32, prev, comm, nullptr), "recv");
    BRAID_TRY(braidGroupEnd(), "group end");
    for (size_t i = 0; i < count; ++i) {
      if (in[i] != static_cast<int32_t>(prev * 1000003 + i)) {
        return "rank " + std::to_string(rank) + ": element " + std::to_string(i) +
               " from rank " + std::to_string(prev) + " is " + std::to_string(in[i]);
      }
    }
    BRAID_TRY(braidBarrier(comm, nullptr), "barrier");
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a rank killed between collectives over verbs: the others get braidRemoteError naming "
          "it, without waiting out the deadline",
          "[verbs][faults]") {
  SKIP_WITHOUT_VERBS();
  CommJob job = VerbsJob(3);
  job.config.timeoutMs = 60000;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    std::vector<float> data(1 << 16, 1.0f);  // 256 KiB: two ring slots per message
    BRAID_TRY(braidAllReduce(data.data(), data.data(), data.size(), braidFloat32, braidSum, comm,
                             nullptr),
              "first allreduce");
    if (rank == 2) kill(getpid(), SIGKILL);
    const auto start = std::chrono::steady_clock::now();
    braidResult_t rc = braidAllReduce(data.data(), data.data(), data.size(), braidFloat32,
                                      braidSum, comm, nullptr);
    const auto took = std::chrono::steady_clock::now() - start;
    const std::string why = braidGetLastError(comm);
    if (rc != braidRemoteError) {
      return "rank " + std::to_string(rank) + ": expected braidRemoteError, got " +
             braidGetErrorString(rc) + ": " + why;
    }
    if (why.find("rank 2") == std::string::npos) {
      return "rank " + std::to_string(rank) + ": the error does not name rank 2: " + why;
    }
    if (took > std::chrono::seconds(10)) {
      return "rank " + std::to_string(rank) + ": the error took " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(took).count()) + " s";
    }
    return "";
  });
  CHECK(results[0] == "");
  CHECK(results[1] == "");
  CHECK(results[2] == "killed by signal 9");
}

}  // namespace
}  // namespace braid::testing
