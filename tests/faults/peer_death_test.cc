// kill -9 of one rank in the middle of a collective: every surviving rank must return
// braidRemoteError naming the dead rank within 10 s (the lost link is detected, not waited out),
// on every transport, for every collective; later calls on that communicator fail at once, and
// braidCommGetAsyncError reports the failure; and the rendezvous store loses no key.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/faults/store_census.h"
#include "tests/harness/communicator.h"

namespace {

constexpr int kRanks = 3;  // every pair is a ring neighbour, so every link exists after init
constexpr int kDead = 1;
constexpr size_t kCount = size_t{4} << 20;  // floats per rank: long enough to die mid-way

braidResult_t RunCollective(const char* name, braidComm_t comm, std::vector<float>& send,
                            std::vector<float>& recv) {
  const std::string op = name;
  if (op == "allreduce") return braidAllReduce(send.data(), recv.data(), kCount, braidFloat32, braidSum, comm, nullptr);
  if (op == "broadcast") return braidBroadcast(send.data(), recv.data(), kCount, braidFloat32, 0, comm, nullptr);
  if (op == "reduce") return braidReduce(send.data(), recv.data(), kCount, braidFloat32, braidSum, 0, comm, nullptr);
  if (op == "allgather") return braidAllGather(send.data(), recv.data(), kCount / kRanks, braidFloat32, comm, nullptr);
  if (op == "reducescatter") return braidReduceScatter(send.data(), recv.data(), kCount / kRanks, braidFloat32, braidSum, comm, nullptr);
  if (op == "alltoall") return braidAllToAll(send.data(), recv.data(), kCount / kRanks, braidFloat32, comm, nullptr);
  if (op == "gather") return braidGather(send.data(), recv.data(), kCount / kRanks, braidFloat32, 0, comm, nullptr);
  if (op == "scatter") return braidScatter(send.data(), recv.data(), kCount / kRanks, braidFloat32, 0, comm, nullptr);
  return braidBarrier(comm, nullptr);
}

// Ranks as processes (one is killed), each with a communicator of `transports` from `id`, whose
// store the test reads for its census. Detection must not be a timeout: braid's deadline is far
// above the 10 s the test allows.
braid::testing::CommJob KillJob(int size, const char* transports, const braidUniqueId& id) {
  braid::testing::CommJob job;
  job.size = size;
  job.ranks = braid::testing::Ranks::kProcesses;
  job.config.timeoutMs = 60000;
  job.config.transports = transports;
  job.ids = {id};
  job.timeout_ms = 30000;
  return job;
}

// The body destroys `comm` itself (the job's body_destroys), so the census is checked after it.
std::string Survive(braidComm_t comm, const braidUniqueId& id, int rank, const char* collective) {
  std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
  // What the store holds before the death (survivors), recorded before the dead rank arms its kill.
  braid::testing::StoreCensus census;
  if (rank != kDead) {
    std::string taken = census.Take(id, "rank " + std::to_string(rank));
    if (!taken.empty()) return taken;
  }
  auto store = braid::testing::ConnectToStore(id);
  if (!store.ok()) return "connecting to the store: " + store.status().message();
  braid::Status arrived =
      store.value()->Barrier("faults/before-fault", kRanks, braid::Deadline::AfterMs(30000));
  if (!arrived.ok()) return "store barrier: " + arrived.message();
  if (rank == kDead) {
    // Die while the collective is running: a timer thread sends SIGKILL to this process.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      kill(getpid(), SIGKILL);
    }).detach();
    for (;;) RunCollective(collective, comm, send, recv);
  }
  auto start = std::chrono::steady_clock::now();
  braidResult_t rc = braidSuccess;
  // Repeat until the death is noticed (a short collective may finish before the kill).
  while (rc == braidSuccess && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    rc = RunCollective(collective, comm, send, recv);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string message = braidGetLastError(comm);
  std::string failure;
  if (rc != braidRemoteError) {
    failure = "expected braidRemoteError, got " + std::to_string(rc) + ": " + message;
  } else if (seconds > 10.0) {
    failure = "noticed only after " + std::to_string(seconds) + " s";
  } else if (message.find("rank " + std::to_string(kDead)) == std::string::npos) {
    failure = "the error does not name rank 1: " + message;
  } else if (RunCollective(collective, comm, send, recv) == braidSuccess) {
    failure = "a later call succeeded on a broken communicator";
  } else {
    braidResult_t async = braidSuccess;
    braidCommGetAsyncError(comm, &async);
    if (async != braidRemoteError) failure = "braidCommGetAsyncError says " + std::to_string(async);
  }
  braidCommDestroy(comm);
  std::string lost = census.CheckNoneLost();
  if (!lost.empty()) failure += (failure.empty() ? "" : "; ") + lost;
  return failure;
}

// Kills rank kDead in the middle of `collective` (over `transports`, with `algo` forced unless
// null) and checks every survivor's result and the store.
void KillMidCollective(const char* transports, const char* collective, const char* algo) {
  const braidUniqueId id = braid::testing::NewId();
  braid::testing::CommJob job = KillJob(kRanks, transports, id);
  if (algo != nullptr) job.config.algo = algo;
  job.body_destroys = true;
  auto results = braid::testing::RunComms(job, [&](braidComm_t comm, int rank, int) {
    return Survive(comm, id, rank, collective);
  });
  CHECK(results[kDead].find("killed by signal 9") != std::string::npos);
  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank == kDead) continue;
    INFO("rank " << rank << ": " << results[rank]);
    CHECK(results[rank].empty());
    // The store, hosted by this process, still holds what the survivor wrote before the death.
    CHECK(braid::testing::CheckMarker(id, "rank " + std::to_string(rank)) == "");
  }
}

}  // namespace

TEST_CASE("a rank killed mid-collective is named by every survivor within 10 s", "[faults][kill]") {
  const char* transports = GENERATE("tcp", "shm");
  const char* collective = GENERATE("allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                                    "alltoall", "gather", "scatter", "barrier");
  CAPTURE(transports, collective);
  KillMidCollective(transports, collective, nullptr);
}

// The same with the read family forced (algorithms/read_family.h): a survivor may be reading the
// dead rank's buffer (process_vm_readv of a process that is gone), waiting for its offer, or
// waiting for its answer before giving its own buffer back.
TEST_CASE("a rank killed mid-collective by single-copy reads is named by every survivor within "
          "10 s",
          "[faults][kill][read]") {
  const char* collective = GENERATE("broadcast", "allgather", "alltoall", "gather", "scatter");
  CAPTURE(collective);
  const std::string algo = std::string(collective) + ":read";
  KillMidCollective("shm", collective, algo.c_str());
}

// A rank that is already dead when a survivor first needs a link to it. With 4 ranks only ring
// neighbours are linked at init, so ranks 0 and 2 link on first use (pairwise all-to-all needs
// every pair): the survivor's Connect must notice the peer is gone (its listener refuses), not
// wait for the 60 s timeout.
TEST_CASE("a rank dead before a survivor links to it is named within 10 s", "[faults][kill][lazy]") {
  const char* transports = GENERATE("tcp", "shm");
  CAPTURE(transports);
  constexpr int kFour = 4, kGone = 2;
  const braidUniqueId id = braid::testing::NewId();
  auto results = braid::testing::RunComms(KillJob(kFour, transports, id), [&](braidComm_t comm, int rank, int) -> std::string {
    auto store = braid::testing::ConnectToStore(id);
    if (!store.ok()) return "connecting to the store: " + store.status().message();
    braid::Status arrived = store.value()->Barrier("faults/lazy", kFour, braid::Deadline::AfterMs(30000));
    if (!arrived.ok()) return "store barrier: " + arrived.message();
    if (rank == kGone) kill(getpid(), SIGKILL);
    // Let the death happen before anyone needs the missing links.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::vector<float> send(kFour * 1024, 1.0f), recv(kFour * 1024, 0.0f);
    auto start = std::chrono::steady_clock::now();
    braidResult_t rc = braidAllToAll(send.data(), recv.data(), 1024, braidFloat32, comm, nullptr);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string message = braidGetLastError(comm);
    if (rc != braidRemoteError) return "expected braidRemoteError, got " + std::to_string(rc) + ": " + message;
    if (seconds > 10.0) return "noticed only after " + std::to_string(seconds) + " s: " + message;
    if (message.find("rank " + std::to_string(kGone)) == std::string::npos) {
      return "the error does not name rank 2: " + message;
    }
    return "";
  });
  CHECK(results[kGone].find("killed by signal 9") != std::string::npos);
  for (int rank = 0; rank < kFour; ++rank) {
    if (rank == kGone) continue;
    INFO("rank " << rank << ": " << results[rank]);
    CHECK(results[rank].empty());
  }
}
