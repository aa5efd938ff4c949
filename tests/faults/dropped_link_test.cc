// A link that drops mid-run (transport::DroppingConnection, injected through the communicator's
// connection decorator): every rank must fail within 10 s with braidRemoteError naming a rank of
// the broken link, for every collective, on TCP and on shared memory; and the rendezvous store
// loses no key.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/faults/store_census.h"
#include "tests/harness/communicator.h"
#include "transport/fault_injection.h"

namespace {

constexpr size_t kCount = 3 * 1024;

braidResult_t RunCollective(const std::string& op, braidComm_t comm, std::vector<float>& send,
                            std::vector<float>& recv) {
  if (op == "allreduce") return braidAllReduce(send.data(), recv.data(), kCount, braidFloat32, braidSum, comm, nullptr);
  if (op == "broadcast") return braidBroadcast(send.data(), recv.data(), kCount, braidFloat32, 0, comm, nullptr);
  // Root 1: every reduce algorithm then sends over the dropping link 0 -> 1 (the chain runs
  // 2 -> 0 -> 1; rooted at 0 it would run 1 -> 2 -> 0 and never touch it).
  if (op == "reduce") return braidReduce(send.data(), recv.data(), kCount, braidFloat32, braidSum, 1, comm, nullptr);
  if (op == "allgather") return braidAllGather(send.data(), recv.data(), kCount / 3, braidFloat32, comm, nullptr);
  if (op == "reducescatter") return braidReduceScatter(send.data(), recv.data(), kCount / 3, braidFloat32, braidSum, comm, nullptr);
  if (op == "alltoall") return braidAllToAll(send.data(), recv.data(), kCount / 3, braidFloat32, comm, nullptr);
  if (op == "gather") return braidGather(send.data(), recv.data(), kCount / 3, braidFloat32, 0, comm, nullptr);
  if (op == "scatter") return braidScatter(send.data(), recv.data(), kCount / 3, braidFloat32, 0, comm, nullptr);
  return braidBarrier(comm, nullptr);
}

}  // namespace

TEST_CASE("a dropped link fails every rank quickly, naming the link", "[faults][drop]") {
  const char* transports = GENERATE("tcp", "shm");
  const std::string collective = GENERATE("allreduce", "broadcast", "reduce", "allgather",
                                          "reducescatter", "alltoall", "gather", "scatter", "barrier");
  CAPTURE(transports, collective);
  // Rank 0's link to rank 1 drops on its 6th post.
  braid::transport::SetConnectionDecoratorForTesting(
      [](int self, int peer, std::unique_ptr<braid::transport::Connection> link)
          -> std::unique_ptr<braid::transport::Connection> {
        if (self == 0 && peer == 1) {
          return std::make_unique<braid::transport::DroppingConnection>(std::move(link), self, 5);
        }
        return link;
      });
  braid::testing::CommJob job;
  job.size = 3;
  job.config.timeoutMs = 60000;  // detection must come from the lost link, not a timeout
  job.config.transports = transports;
  job.ids = {braid::testing::NewId()};  // the store census reads the job's store
  job.body_destroys = true;             // the census is checked after the destroy
  const braidUniqueId id = job.ids[0];
  auto results = braid::testing::RunComms(job, [&](braidComm_t comm, int rank, int size) -> std::string {
    // What the store holds before the link drops (every rank's census is in before any collective).
    braid::testing::StoreCensus census;
    std::string taken = census.Take(id, "rank " + std::to_string(rank));
    auto store = braid::testing::ConnectToStore(id);
    if (taken.empty() && !store.ok()) taken = "connecting to the store: " + store.status().message();
    if (taken.empty()) {
      braid::Status arrived =
          store.value()->Barrier("faults/before-fault", size, braid::Deadline::AfterMs(30000));
      if (!arrived.ok()) taken = "store barrier: " + arrived.message();
    }
    if (!taken.empty()) {
      braidCommDestroy(comm);
      return taken;
    }
    std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
    auto start = std::chrono::steady_clock::now();
    braidResult_t rc = braidSuccess;
    while (rc == braidSuccess && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      rc = RunCollective(collective, comm, send, recv);
    }
    std::string message = braidGetLastError(comm);
    braidCommDestroy(comm);
    if (rc != braidRemoteError) return "expected braidRemoteError, got " + std::to_string(rc) + ": " + message;
    if (message.find("rank 0") == std::string::npos && message.find("rank 1") == std::string::npos) {
      return "the error names neither end of the dropped link: " + message;
    }
    return census.CheckNoneLost();
  });
  braid::transport::SetConnectionDecoratorForTesting(nullptr);
  INFO(braid::testing::Failures(results));
  CHECK(braid::testing::Failures(results).empty());
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(braid::testing::CheckMarker(id, "rank " + std::to_string(rank)) == "");
  }
}
