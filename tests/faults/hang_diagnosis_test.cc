// A collective that times out names who is missing: ranks that are idle elsewhere (with the last
// collective they entered) and ranks that do not answer at all (a frozen process). The frozen
// case covers every collective and send/recv, on TCP and on shared memory: every rank that waits
// on the frozen one returns braidTimeout within a bounded time naming it, and the rendezvous store
// loses no key.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/faults/store_census.h"
#include "tests/harness/communicator.h"

namespace {

using braid::testing::Failures;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Rank `late` joins the first allreduce only; the others enter a second one and time out. A rank
// that timed out keeps its communicator (it goes when the body returns) until every waiting rank
// has timed out: the other one's diagnosis may still ask it where it is. `waiting` counts the
// waiting ranks that are done.
std::string RunWithLateRank(braidComm_t comm, int rank, int size, int late, bool freeze,
                            std::atomic<int>* waiting) {
  float x = 1;
  if (braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) != braidSuccess) {
    return std::string("first allreduce: ") + braidGetLastError(comm);
  }
  if (rank == late) {
    if (freeze) raise(SIGSTOP);  // frozen until the harness kills it
    std::this_thread::sleep_for(std::chrono::seconds(4));  // "busy in user code"
    return "";
  }
  braidResult_t rc = braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr);
  std::string message = braidGetLastError(comm);
  ++*waiting;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (waiting->load() < size - 1 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (rc != braidTimeout) return "expected braidTimeout, got " + std::to_string(rc) + ": " + message;
  return "MESSAGE:" + message;
}

}  // namespace

TEST_CASE("a timed-out allreduce names the idle rank and its last collective", "[faults][timeout]") {
  braid::testing::CommJob job;
  job.size = 3;
  job.config.timeoutMs = 1500;
  std::atomic<int> waiting{0};
  auto results = braid::testing::RunComms(job, [&](braidComm_t comm, int rank, int size) {
    return RunWithLateRank(comm, rank, size, 2, false, &waiting);
  });
  CHECK(results[2].empty());
  for (int rank : {0, 1}) {
    INFO("rank " << rank << ": " << results[rank]);
    REQUIRE(results[rank].rfind("MESSAGE:", 0) == 0);
    CHECK(Has(results[rank], "had not reached allreduce #1"));
    CHECK(Has(results[rank], "rank 2 (idle; last entered allreduce #0 (4 bytes))"));
    // The root cause leads: the idle rank, whichever waiting rank diagnosed it (this one while
    // the other was still inside the collective, or the other, which timed out first and
    // recorded it before closing its links).
    CHECK(Has(results[rank], "MESSAGE:rank 2 had not reached allreduce #1 (idle; last entered "
                             "allreduce #0 (4 bytes); seen by rank "));
    const std::string other = std::to_string(1 - rank);
    CHECK((Has(results[rank], "ranks that reached allreduce #1: " + other) ||
           Has(results[rank], "connection to rank " + other + " lost")));
  }
}

namespace {

// --- a frozen rank (SIGSTOP) in every operation ---

constexpr int kRanks = 3;
constexpr int kStopped = 1;
constexpr int kTimeoutMs = 2000;
constexpr size_t kCount = 3 * 256;  // floats; divisible by kRanks
// Upper bound for one waiting rank: the timeout, the hang diagnosis (it waits up to 5 s for the
// frozen rank's answer, then reads the answers), and slack for a loaded 2-core machine.
constexpr double kBoundSeconds = 20.0;

struct Operation {
  const char* name;
  int root;
  // Whether every survivor depends on data from the frozen rank. Reduce and gather to rank 0:
  // only the root must wait; rank 2 may have handed its part over directly and finished.
  bool every_survivor_waits;
};

// Broadcast and scatter come from the frozen root, so the others need its data.
constexpr Operation kOperations[] = {
    {"allreduce", 0, true}, {"broadcast", kStopped, true}, {"reduce", 0, false},
    {"allgather", 0, true}, {"reducescatter", 0, true},    {"alltoall", 0, true},
    {"gather", 0, false},   {"scatter", kStopped, true},   {"barrier", 0, true},
    {"send/recv", 0, true}};  // every survivor receives from the frozen rank
constexpr int kNumOperations = sizeof(kOperations) / sizeof(kOperations[0]);

braidResult_t RunOperation(const Operation& op, braidComm_t comm, std::vector<float>& send,
                           std::vector<float>& recv) {
  const std::string name = op.name;
  const size_t part = kCount / kRanks;
  if (name == "allreduce") return braidAllReduce(send.data(), recv.data(), kCount, braidFloat32, braidSum, comm, nullptr);
  if (name == "broadcast") return braidBroadcast(send.data(), recv.data(), kCount, braidFloat32, op.root, comm, nullptr);
  if (name == "reduce") return braidReduce(send.data(), recv.data(), kCount, braidFloat32, braidSum, op.root, comm, nullptr);
  if (name == "allgather") return braidAllGather(send.data(), recv.data(), part, braidFloat32, comm, nullptr);
  if (name == "reducescatter") return braidReduceScatter(send.data(), recv.data(), part, braidFloat32, braidSum, comm, nullptr);
  if (name == "alltoall") return braidAllToAll(send.data(), recv.data(), part, braidFloat32, comm, nullptr);
  if (name == "gather") return braidGather(send.data(), recv.data(), part, braidFloat32, op.root, comm, nullptr);
  if (name == "scatter") return braidScatter(send.data(), recv.data(), part, braidFloat32, op.root, comm, nullptr);
  if (name == "barrier") return braidBarrier(comm, nullptr);
  return braidRecv(recv.data(), kCount, braidFloat32, kStopped, comm, nullptr);
}

// The ranks listed after "did not answer (process gone or frozen?): " (up to ';' or ']').
std::vector<std::string> SilentRanks(const std::string& message) {
  const std::string lead = "did not answer (process gone or frozen?): ";
  std::vector<std::string> ranks;
  size_t at = message.find(lead);
  if (at == std::string::npos) return ranks;
  std::string list = message.substr(at + lead.size());
  list = list.substr(0, list.find_first_of(";]"));
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    ranks.push_back(item);
  }
  return ranks;
}

// "" if the outcome of `op` on a surviving rank is what a frozen rank 1 must cause.
std::string Judge(const Operation& op, int rank, braidResult_t rc, const std::string& message,
                  double seconds) {
  const bool must_wait = op.every_survivor_waits || rank == op.root;
  if (seconds > kBoundSeconds) return "returned only after " + std::to_string(seconds) + " s";
  if (rc == braidSuccess && !must_wait) return "";  // nothing to receive from the frozen rank
  if (rc != braidTimeout) return "expected braidTimeout, got " + std::to_string(rc) + ": " + message;
  if (std::string(op.name) == "send/recv") {
    // Point-to-point has no sequence to diagnose; the error names the peer it waited on.
    const std::string expected = "receive of " + std::to_string(kCount * sizeof(float)) +
                                 " bytes from rank " + std::to_string(kStopped);
    if (!Has(message, expected)) return "the error does not say '" + expected + "': " + message;
    return "";
  }
  // The root cause leads: the frozen rank (this rank's diagnosis, or, if the other survivor gave
  // up first and closed its links, the one it recorded).
  const std::string root = "rank " + std::to_string(kStopped) + " did not answer at ";
  if (message.rfind(root, 0) != 0) return "the error does not lead with '" + root + "': " + message;
  // This rank's own diagnosis, if it made one, names exactly the frozen rank as not answering.
  if (Has(message, "did not answer (process gone or frozen?)") &&
      SilentRanks(message) != std::vector<std::string>{std::to_string(kStopped)}) {
    return "the error does not name exactly rank " + std::to_string(kStopped) +
           " as not answering: " + message;
  }
  // ... and the collective by name and sequence number (#0 was the warm-up barrier).
  const std::string here = std::string(op.name) + " #1";
  if (!Has(message, here)) return "the error does not name " + here + ": " + message;
  return "";
}

// /proc/<pid>/stat state 'T' (stopped); waits up to `ms`.
bool WaitUntilStopped(pid_t pid, int ms) {
  for (int waited = 0; waited < ms; waited += 5) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    size_t paren = text.rfind(')');  // the command name may hold spaces
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Each init starts together on every rank (lined up through the store of ids[0], which also
// holds the test's own coordination keys), so the short timeout only has to cover the init itself.
std::string LineUpForInit(const braidUniqueId& id, int index) {
  auto store = braid::testing::ConnectToStore(id);
  if (!store.ok()) return "connecting to the store: " + store.status().message();
  const std::string key = "faults/init/" + std::to_string(index);
  braid::Status status = store.value()->Barrier(key, kRanks, braid::Deadline::AfterMs(30000));
  return status.ok() ? "" : "store barrier " + key + ": " + status.message();
}

// One process per rank, one communicator per operation (comms[i], from ids[i], for
// kOperations[i]): after a warm-up barrier on each, rank 1 stops itself and the survivors run
// every operation at once, each on its own communicator and thread. The body destroys the
// communicators itself (the job's body_destroys), so the census is checked after the destroy.
std::string RunWithFrozenRank(const std::vector<braidComm_t>& comms,
                              const std::vector<braidUniqueId>& ids, int rank) {
  auto store = braid::testing::ConnectToStore(ids[0]);  // the test's own coordination keys
  if (!store.ok()) return "connecting to the store: " + store.status().message();
  auto barrier = [&](const std::string& key, int n) -> std::string {
    braid::Status status = store.value()->Barrier("faults/" + key, n, braid::Deadline::AfterMs(30000));
    return status.ok() ? "" : "store barrier " + key + ": " + status.message();
  };
  for (int i = 0; i < kNumOperations; ++i) {
    if (braidBarrier(comms[i], nullptr) != braidSuccess) {
      return std::string("warm-up barrier for ") + kOperations[i].name + ": " + braidGetLastError(comms[i]);
    }
  }
  const std::string who = "rank " + std::to_string(rank);
  std::vector<braid::testing::StoreCensus> censuses(kNumOperations);
  if (rank != kStopped) {
    for (int i = 0; i < kNumOperations; ++i) {
      std::string taken = censuses[i].Take(ids[i], who);
      if (!taken.empty()) return taken;
    }
  }
  std::string arrived = barrier("before-fault", kRanks);
  if (!arrived.empty()) return arrived;
  if (rank == kStopped) {
    braid::Status set = store.value()->Set("faults/stopped-pid", std::to_string(getpid()),
                                           braid::Deadline::AfterMs(10000));
    if (!set.ok()) return "publishing the pid: " + set.message();
    raise(SIGSTOP);  // a survivor SIGKILLs this process while it is stopped
    return "resumed after SIGSTOP (it should have been killed while stopped)";
  }

  auto pid_text = store.value()->Get("faults/stopped-pid", braid::Deadline::AfterMs(30000));
  if (!pid_text.ok()) return "reading the stopped rank's pid: " + pid_text.status().message();
  const pid_t stopped = static_cast<pid_t>(std::stol(pid_text.value()));
  if (!WaitUntilStopped(stopped, 10000)) return "rank 1 (pid " + pid_text.value() + ") never stopped";

  std::vector<std::string> outcomes(kNumOperations);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNumOperations; ++i) {
    threads.emplace_back([&, i] {
      std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
      auto start = std::chrono::steady_clock::now();
      braidResult_t rc = RunOperation(kOperations[i], comms[i], send, recv);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      outcomes[i] = Judge(kOperations[i], rank, rc, braidGetLastError(comms[i]), seconds);
    });
  }
  for (auto& t : threads) t.join();

  // Both survivors are done before the frozen rank goes, so neither sees its links drop instead.
  std::string done = barrier("survivors-done", kRanks - 1);
  kill(stopped, SIGKILL);  // not reaped before every rank has exited, so the pid is still ours
  for (braidComm_t comm : comms) braidCommDestroy(comm);

  std::string failures = done;
  for (int i = 0; i < kNumOperations; ++i) {
    std::string lost = censuses[i].CheckNoneLost();
    if (!outcomes[i].empty()) failures += std::string(kOperations[i].name) + ": " + outcomes[i] + "\n";
    if (!lost.empty()) failures += std::string(kOperations[i].name) + ": " + lost + "\n";
  }
  return failures;
}

}  // namespace

TEST_CASE("a frozen (SIGSTOP) rank is named by every rank waiting on it, in every operation",
          "[faults][timeout][sigstop]") {
  const char* transports = GENERATE("tcp", "shm");
  CAPTURE(transports);
  braid::testing::CommJob job;
  job.size = kRanks;
  job.ranks = braid::testing::Ranks::kProcesses;
  job.config.timeoutMs = kTimeoutMs;
  job.config.transports = transports;
  job.ids = braid::testing::NewIds(kNumOperations);
  job.before_init = [&](int, int index) { return LineUpForInit(job.ids[0], index); };
  job.body_destroys = true;
  job.timeout_ms = 60000;
  const std::vector<braidUniqueId>& ids = job.ids;
  auto start = std::chrono::steady_clock::now();
  auto results = braid::testing::RunCommSets(
      job, [&](const std::vector<braidComm_t>& comms, int rank, int) {
        return RunWithFrozenRank(comms, ids, rank);
      });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("whole run " << seconds << " s");
  CHECK(Has(results[kStopped], "killed by signal 9"));  // stopped, never resumed, then killed
  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank == kStopped) continue;
    INFO("rank " << rank << ":\n" << results[rank]);
    CHECK(results[rank].empty());
    // The store, hosted by this process, still holds what the survivors wrote before the fault.
    for (int i = 0; i < kNumOperations; ++i) {
      CHECK(braid::testing::CheckMarker(ids[i], "rank " + std::to_string(rank)) == "");
    }
  }
}
