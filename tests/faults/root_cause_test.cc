// Root causes (issue 20, docs/FAILURES.md): whatever way a rank goes, every survivor's error names
// the rank that failed first, before anything else, with the code that rank's failure calls for —
// not the neighbour that gave up after losing its own link to it.
//
// Every job here: ranks as processes on one communicator (the store is hosted by this test
// process, so the census reads it before and after), one warm-up barrier, then every survivor
// runs one collective in a loop while the victim goes in one way. Each survivor asserts:
//   - the code: braidRemoteError for a rank that is gone (SIGKILL, SIGSEGV inside the collective,
//     exit(1) without destroying its communicator), braidAborted for a rank whose application
//     called braidCommAbort, braidTimeout for a frozen rank (SIGSTOP), the bad input's own code
//     for a rank whose call was refused for bad input while the others were inside it
//     (braidInvalidArgument for a bad datatype, braidInvalidUsage for a stream on the barrier);
//   - that the first rank the message names is the victim (so "rank 2 is gone (seen by rank 1);
//     rank 0's own view: ..." passes and "rank 0: ... connection to rank 1 lost" fails);
//   - the time bound: 10 s with a 10 minute timeout for a death (the loss is detected, not waited
//     out), the timeout plus the hang diagnosis for a stall;
//   - that a later call and braidCommGetAsyncError give the same code and the same message;
//   - that no store key was lost (store_census.h).
//
// The matrix: the default run covers tcp and shm, 3, 4 and 8 ranks, the victim at every position,
// every way of going and every operation, with ways and operations rotated over the positions
// (so each appears on each transport and size) rather than crossed — 30 death jobs, five stalls,
// two jobs where two ranks die at once, a first link to an aborted rank (tcp, shm, both), and
// bad input on one rank at every position of tcp and shm x 3, 4 and 8 ranks with the operations
// rotated (30 jobs): ~55 s on a 2-core machine. The full cross product (2 transports x 15
// positions x 4 ways x 10 operations: 1200 death jobs, ~10 minutes there; plus 300 stalls, ~40
// minutes, and 300 bad inputs) runs with
//   bazel test //tests/faults:root_cause_test --test_env=BRAID_FAULT_MATRIX=full
//       --test_timeout=7200   (one command line)
#include <catch2/catch.hpp>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/faults/message_reading.h"
#include "tests/faults/store_census.h"
#include "tests/harness/communicator.h"

namespace {

using braid::testing::FirstRankNamed;
using braid::testing::Lead;

enum class Way { kSigkill, kExit, kSegv, kAbort, kSigstop, kBadInput };

const char* WayName(Way way) {
  switch (way) {
    case Way::kSigkill: return "SIGKILL";
    case Way::kExit: return "exit(1) without destroy";
    case Way::kSegv: return "SIGSEGV inside the collective";
    case Way::kAbort: return "braidCommAbort";
    case Way::kSigstop: return "SIGSTOP";
    case Way::kBadInput: return "bad input";
  }
  return "?";
}

constexpr const char* kOperations[] = {"allreduce", "broadcast", "reduce",  "allgather",
                                       "reducescatter", "alltoall", "gather", "scatter",
                                       "barrier",   "send/recv"};
constexpr int kNumOperations = sizeof(kOperations) / sizeof(kOperations[0]);
constexpr size_t kCount = 256 * 1024;  // floats per rank: 1 MiB, as in the report
constexpr int kDeathTimeoutMs = 600000;  // a death must be detected, never waited out
constexpr double kDeathBoundSeconds = 10.0;
constexpr int kStallTimeoutMs = 2000;
// A stall is found at the timeout, then the hang diagnosis waits up to 5 s for the frozen rank's
// answer; the rest is slack for 8 processes on 2 cores.
constexpr double kStallBoundSeconds = kStallTimeoutMs / 1000.0 + 5.0 + 6.0;

struct Case {
  const char* transport;
  int size;
  std::vector<int> victims;  // one, or two that die at once
  Way way;
  const char* operation;
};

std::string Describe(const Case& c) {
  std::string victims;
  for (int v : c.victims) victims += (victims.empty() ? "" : "+") + std::to_string(v);
  return std::string(c.transport) + ", " + std::to_string(c.size) + " ranks, victim " + victims +
         ", " + WayName(c.way) + ", " + c.operation;
}

bool IsVictim(const Case& c, int rank) {
  for (int v : c.victims) {
    if (v == rank) return true;
  }
  return false;
}

// Way::kBadInput: what the victim passes instead of float (no braidDataType_t has this value),
// and, to the barrier, which takes no datatype, a stream where host buffers need NULL.
constexpr auto kNoDataType = static_cast<braidDataType_t>(42);
int not_a_stream = 0;

// One call of operation `name`; with `bad`, the same call with bad input (kNoDataType, or a
// stream for the barrier), which braid refuses before anything is sent.
braidResult_t RunOperation(const char* name, braidComm_t comm, int rank, int size,
                           std::vector<float>& send, std::vector<float>& recv, bool bad = false) {
  const std::string op = name;
  const size_t part = kCount / static_cast<size_t>(size);
  const braidDataType_t type = bad ? kNoDataType : braidFloat32;
  if (op == "allreduce") return braidAllReduce(send.data(), recv.data(), kCount, type, braidSum, comm, nullptr);
  if (op == "broadcast") return braidBroadcast(send.data(), recv.data(), kCount, type, 0, comm, nullptr);
  if (op == "reduce") return braidReduce(send.data(), recv.data(), kCount, type, braidSum, 0, comm, nullptr);
  if (op == "allgather") return braidAllGather(send.data(), recv.data(), part, type, comm, nullptr);
  if (op == "reducescatter") return braidReduceScatter(send.data(), recv.data(), part, type, braidSum, comm, nullptr);
  if (op == "alltoall") return braidAllToAll(send.data(), recv.data(), part, type, comm, nullptr);
  if (op == "gather") return braidGather(send.data(), recv.data(), part, type, 0, comm, nullptr);
  if (op == "scatter") return braidScatter(send.data(), recv.data(), part, type, 0, comm, nullptr);
  if (op == "barrier") return braidBarrier(comm, bad ? &not_a_stream : nullptr);
  // send/recv: a ring of point-to-point messages, posted together (bad: the send's datatype).
  braidResult_t rc = braidGroupStart();
  if (rc != braidSuccess) return rc;
  braidResult_t sent = braidSend(send.data(), part, type, (rank + 1) % size, comm, nullptr);
  braidResult_t received =
      braidRecv(recv.data(), part, braidFloat32, (rank + size - 1) % size, comm, nullptr);
  rc = braidGroupEnd();
  if (sent != braidSuccess) return sent;
  if (received != braidSuccess) return received;
  return rc;
}

// "" if every rank the message calls silent or frozen is `frozen`: the root causes' "rank N did
// not answer" and the diagnosis' list of ranks that did not answer (a live rank blocked in the
// collective answers the diagnosis, so it is never listed).
std::string OnlyFrozen(const std::string& message, int frozen) {
  const std::string lead = Lead(message);
  for (size_t at = lead.find(" did not answer"); at != std::string::npos;
       at = lead.find(" did not answer", at + 1)) {
    const size_t rank_word = lead.rfind("rank ", at);
    if (rank_word == std::string::npos || std::atoi(lead.c_str() + rank_word + 5) != frozen) {
      return "a rank other than the frozen " + std::to_string(frozen) + " is called silent: " + message;
    }
  }
  const std::string list_lead = "did not answer (process gone or frozen?): ";
  const size_t list = message.find(list_lead);
  if (list != std::string::npos) {
    std::string ranks = message.substr(list + list_lead.size());
    ranks = ranks.substr(0, ranks.find_first_of(";]"));
    if (ranks != std::to_string(frozen)) {
      return "the diagnosis lists " + ranks + " as not answering, not only rank " +
             std::to_string(frozen) + ": " + message;
    }
  }
  return "";
}

// Whether the root causes (the part before the own view) name every victim: "rank V is gone".
bool NamesEveryVictim(const Case& c, const std::string& message) {
  const std::string lead = Lead(message);
  for (int v : c.victims) {
    const std::string named = "rank " + std::to_string(v) + " ";
    if (lead.rfind(named, 0) != 0 && lead.find("; " + named) == std::string::npos) return false;
  }
  return true;
}

braidResult_t ExpectedCode(const Case& c) {
  switch (c.way) {
    case Way::kAbort: return braidAborted;
    case Way::kSigstop: return braidTimeout;
    case Way::kBadInput:
      return std::string(c.operation) == "barrier" ? braidInvalidUsage : braidInvalidArgument;
    default: return braidRemoteError;
  }
}

// Ways whose victim stays alive until every survivor has its answer, so that the survivors learn
// the cause from its record and goodbye, not from a process that happens to be gone.
bool VictimStays(Way way) { return way == Way::kAbort || way == Way::kBadInput; }

std::atomic<bool> exit_now{false};  // Way::kExit: the victim's main thread exits when set
std::atomic<bool> bad_now{false};   // Way::kBadInput: the victim's next call passes bad input

// Runs `go` on a thread of its own 30 ms from now, while the victim's loop is inside a call.
void Soon(std::function<void()> go) {
  std::thread([go = std::move(go)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    go();
  }).detach();
}

// What the victim does once every rank passed the store barrier. Returns only for an abort or bad
// input (the others end the process, or freeze it until a survivor kills it).
std::string GoAway(const Case& c, braidComm_t comm, int rank, braid::rendezvous::Store& store) {
  std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
  const pthread_t collective_thread = pthread_self();
  switch (c.way) {
    case Way::kSigkill:
      Soon([] { kill(getpid(), SIGKILL); });
      break;
    case Way::kExit:
      // exit(1) from the thread that owns the communicator, between two collectives (the way an
      // application gives up), without destroying the communicator first.
      Soon([] { exit_now.store(true); });
      break;
    case Way::kSegv:
      // Delivered to the thread that is inside the collective. Catch2's handler (inherited over
      // fork) would report it as a failure of this process; the default action is what a real
      // crash does.
      signal(SIGSEGV, SIG_DFL);
      Soon([collective_thread] { pthread_kill(collective_thread, SIGSEGV); });
      break;
    case Way::kAbort:
      Soon([comm] { braidCommAbort(comm); });
      break;
    case Way::kBadInput:
      // Between two calls, as an application bug would: the survivors are inside the next one.
      Soon([] { bad_now.store(true); });
      break;
    case Way::kSigstop: {
      braid::Status set = store.Set("faults/stopped-pid/" + std::to_string(rank),
                                    std::to_string(getpid()), braid::Deadline::AfterMs(10000));
      if (!set.ok()) return "publishing the pid: " + set.message();
      raise(SIGSTOP);  // a survivor SIGKILLs this process while it is stopped
      return "resumed after SIGSTOP (it should have been killed while stopped)";
    }
  }
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    const bool bad = bad_now.load();
    braidResult_t rc = RunOperation(c.operation, comm, rank, c.size, send, recv, bad);
    if (exit_now.load()) exit(1);
    if (rc == braidSuccess && !bad) continue;
    if (!VictimStays(c.way)) continue;  // the others are about to end this process
    const std::string message = braidGetLastError(comm);
    if (c.way == Way::kBadInput && !bad) return "the victim failed before its bad input: " + message;
    if (rc != ExpectedCode(c)) {
      return std::string(WayName(c.way)) + " on the victim: expected code " +
             std::to_string(ExpectedCode(c)) + ", got " + std::to_string(rc) + ": " + message;
    }
    if (FirstRankNamed(message) != rank) return "the victim does not name itself first: " + message;
    // Stay until the survivors are done: they must learn the cause from the record, not from a
    // process that happens to be gone.
    braid::Status done = store.Barrier("faults/survivors-done", c.size, braid::Deadline::AfterMs(60000));
    if (!done.ok()) return "store barrier survivors-done: " + done.message();
    braidCommDestroy(comm);
    return "";
  }
  return std::string("the victim was still running 20 s after going by ") + WayName(c.way);
}

// One survivor: runs the operation until it fails, then judges the failure.
std::string Survive(const Case& c, braidComm_t comm, int rank, braid::rendezvous::Store& store) {
  std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
  const bool stall = c.way == Way::kSigstop;
  const double bound = stall ? kStallBoundSeconds : kDeathBoundSeconds;
  const auto start = std::chrono::steady_clock::now();
  braidResult_t rc = braidSuccess;
  double seconds = 0;
  while (rc == braidSuccess && seconds <= bound) {
    rc = RunOperation(c.operation, comm, rank, c.size, send, recv);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const std::string message = braidGetLastError(comm);
  const int victim = c.victims[0];
  // In the test log, one line per survivor: what a user would read.
  std::fprintf(stderr, "[%s] rank %d after %.2f s: %s\n", Describe(c).c_str(), rank, seconds,
               message.c_str());
  std::string failure;
  if (rc != ExpectedCode(c)) {
    failure = "expected code " + std::to_string(ExpectedCode(c)) + ", got " +
              std::to_string(rc) + " after " + std::to_string(seconds) + " s: " + message;
  } else if (seconds > bound) {
    failure = "noticed only after " + std::to_string(seconds) + " s: " + message;
  } else if (stall && seconds < kStallTimeoutMs / 1000.0 * 0.9) {
    failure = "a stall reported after " + std::to_string(seconds) + " s, before the timeout: " + message;
  } else if (!IsVictim(c, FirstRankNamed(message))) {
    failure = "the first rank named is not the victim " + std::to_string(victim) + ": " + message;
  } else if (!NamesEveryVictim(c, message)) {
    failure = "the root cause does not name every victim: " + message;
  } else if (c.way == Way::kBadInput && Lead(message).find(" bad input ") == std::string::npos) {
    failure = "the root cause does not say bad input: " + message;
  } else if (stall && !OnlyFrozen(message, victim).empty()) {
    failure = OnlyFrozen(message, victim);
  } else {
    braidResult_t again = RunOperation(c.operation, comm, rank, c.size, send, recv);
    const std::string later = braidGetLastError(comm);
    braidResult_t async = braidSuccess;
    braidCommGetAsyncError(comm, &async);
    const std::string after_async = braidGetLastError(comm);
    if (again != rc || later != message) {
      failure = "a later call gave " + std::to_string(again) + ": " + later + "\ninstead of " + message;
    } else if (async != rc) {
      failure = "braidCommGetAsyncError says " + std::to_string(async);
    } else if (after_async != message) {
      failure = "after braidCommGetAsyncError the last error is " + after_async;
    }
  }
  if (stall) {
    // Every survivor is done before the frozen rank goes, so none sees its links drop instead.
    braid::Status done = store.Barrier("faults/survivors-done", c.size - 1, braid::Deadline::AfterMs(60000));
    if (!done.ok()) failure += "; store barrier survivors-done: " + done.message();
    auto pid = store.Get("faults/stopped-pid/" + std::to_string(victim), braid::Deadline::AfterMs(10000));
    if (pid.ok()) kill(static_cast<pid_t>(std::stol(pid.value())), SIGKILL);
  } else if (VictimStays(c.way)) {
    braid::Status done = store.Barrier("faults/survivors-done", c.size, braid::Deadline::AfterMs(60000));
    if (!done.ok()) failure += "; store barrier survivors-done: " + done.message();
  }
  return failure;
}

// Runs one job and checks every rank's result; main thread only.
void RunCase(const Case& c) {
  INFO(Describe(c));
  const braidUniqueId id = braid::testing::NewId();
  braid::testing::CommJob job;
  job.size = c.size;
  job.ranks = braid::testing::Ranks::kProcesses;
  job.config.timeoutMs = c.way == Way::kSigstop ? kStallTimeoutMs : kDeathTimeoutMs;
  job.config.transports = c.transport;
  job.ids = {id};
  job.timeout_ms = 90000;
  job.body_destroys = true;
  if (c.way == Way::kSigstop) {
    // Inits start together, so the short timeout only has to cover the init itself.
    job.before_init = [&](int, int) -> std::string {
      auto store = braid::testing::ConnectToStore(id);
      if (!store.ok()) return "connecting to the store: " + store.status().message();
      braid::Status lined = store.value()->Barrier("faults/init", c.size, braid::Deadline::AfterMs(30000));
      return lined.ok() ? "" : "store barrier init: " + lined.message();
    };
  }
  const auto start = std::chrono::steady_clock::now();
  auto results = braid::testing::RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    auto store = braid::testing::ConnectToStore(id);
    if (!store.ok()) return "connecting to the store: " + store.status().message();
    // Every link an operation may use is made before the fault, as in a job that ran a while
    // (all-to-all links every pair), so that what is judged is the cause passed along links.
    // A first link to a peer that went is covered on its own: an aborted one by the [lazy]
    // case below, a dead one by peer_death_test.
    std::vector<float> all(static_cast<size_t>(c.size), 1.0f), got(static_cast<size_t>(c.size));
    if (braidAllToAll(all.data(), got.data(), 1, braidFloat32, comm, nullptr) != braidSuccess ||
        braidBarrier(comm, nullptr) != braidSuccess) {
      return std::string("warm-up: ") + braidGetLastError(comm);
    }
    braid::testing::StoreCensus census;
    if (!IsVictim(c, rank)) {
      std::string taken = census.Take(id, "rank " + std::to_string(rank));
      if (!taken.empty()) return taken;
    }
    braid::Status arrived =
        store.value()->Barrier("faults/before-fault", c.size, braid::Deadline::AfterMs(30000));
    if (!arrived.ok()) return "store barrier before-fault: " + arrived.message();
    if (IsVictim(c, rank)) return GoAway(c, comm, rank, *store.value());
    std::string failure = Survive(c, comm, rank, *store.value());
    braidCommDestroy(comm);
    std::string lost = census.CheckNoneLost();
    if (!lost.empty()) failure += (failure.empty() ? "" : "; ") + lost;
    return failure;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("job took " << seconds << " s");
  for (int rank = 0; rank < c.size; ++rank) {
    INFO("rank " << rank << ": " << results[rank]);
    if (!IsVictim(c, rank)) {
      CHECK(results[rank].empty());
      CHECK(braid::testing::CheckMarker(id, "rank " + std::to_string(rank)) == "");
      continue;
    }
    switch (c.way) {
      case Way::kSigkill: CHECK(results[rank] == "killed by signal 9"); break;
      case Way::kSegv: CHECK(results[rank] == "killed by signal 11"); break;
      case Way::kSigstop: CHECK(results[rank] == "killed by signal 9"); break;
      case Way::kAbort: CHECK(results[rank].empty()); break;
      case Way::kBadInput: CHECK(results[rank].empty()); break;
      case Way::kExit: CHECK(results[rank].find("exited without reporting") == 0); break;
    }
  }
}

bool FullMatrix() {
  const char* full = std::getenv("BRAID_FAULT_MATRIX");
  return full != nullptr && std::string(full) == "full";
}

constexpr const char* kTransports[] = {"tcp", "shm"};
constexpr int kSizes[] = {3, 4, 8};

// One victim at every position of tcp and shm x 3, 4 and 8 ranks, going by each of `ways`. The
// full matrix crosses every way with every operation at every position; the default rotates
// ways and operations over the positions, so that every way and every operation meet every
// transport and size.
std::vector<Case> EveryPosition(const std::vector<Way>& ways) {
  std::vector<Case> cases;
  int turn = 0;
  for (const char* transport : kTransports) {
    for (int size : kSizes) {
      for (int victim = 0; victim < size; ++victim, ++turn) {
        if (FullMatrix()) {
          for (Way way : ways) {
            for (const char* op : kOperations) cases.push_back({transport, size, {victim}, way, op});
          }
        } else {
          cases.push_back({transport, size, {victim}, ways[(victim + size) % ways.size()],
                           kOperations[turn % kNumOperations]});
        }
      }
    }
  }
  return cases;
}

}  // namespace

TEST_CASE("every survivor names the rank that went first, whichever way it went",
          "[faults][rootcause][death]") {
  for (const Case& c : EveryPosition({Way::kSigkill, Way::kExit, Way::kSegv, Way::kAbort})) {
    RunCase(c);
  }
}

TEST_CASE("two ranks dying at once are both named", "[faults][rootcause][two]") {
  for (const char* transport : kTransports) {
    RunCase({transport, 8, {2, 5}, Way::kSigkill, "allreduce"});
  }
}

TEST_CASE("a frozen rank (SIGSTOP) is named first at the timeout, and only it",
          "[faults][rootcause][sigstop]") {
  std::vector<Case> cases;
  if (FullMatrix()) {
    for (const char* transport : kTransports) {
      for (int size : kSizes) {
        for (int victim = 0; victim < size; ++victim) {
          for (const char* op : kOperations) cases.push_back({transport, size, {victim}, Way::kSigstop, op});
        }
      }
    }
  } else {
    cases = {{"tcp", 3, {1}, Way::kSigstop, "allreduce"},
             {"shm", 4, {0}, Way::kSigstop, "alltoall"},
             {"tcp", 8, {7}, Way::kSigstop, "broadcast"},
             {"shm", 8, {3}, Way::kSigstop, "reducescatter"},
             {"tcp", 4, {2}, Way::kSigstop, "send/recv"}};
  }
  for (const Case& c : cases) RunCase(c);
}

// Bad input on one rank while the others are inside the collective (issue 20: "bad input" as a
// way a rank fails): the victim's call is refused before anything is sent, and the survivors,
// who would otherwise wait for it until their timeout, name it and its bad input first, with the
// refusal's code, within the bound. Every position of tcp and shm x 3, 4 and 8 ranks, the
// operations rotated (the full matrix: every operation at every position).
TEST_CASE("every survivor names the rank whose call was refused for bad input",
          "[faults][rootcause][badinput]") {
  for (const Case& c : EveryPosition({Way::kBadInput})) RunCase(c);
}

// A first link to a rank that aborted: with 4 ranks only ring neighbours are linked at init, so
// rank 2 links to rank 0 on first use (all-to-all), and rank 0, the lower rank, is the one that
// should dial. Rank 0 aborts first and stays alive; rank 2 must still learn "rank 0 aborted"
// within the bound, not at its timeout: an aborted transport closes its listener (tcp: its
// port, shm: its abstract socket), so rank 2's probe of it finds nobody listening. tcp, shm, and
// both (the default: shm's "gone" hands the pair to tcp, whose closed port says the same).
TEST_CASE("a first link to a rank that aborted is found within the bound",
          "[faults][rootcause][lazy]") {
  const char* transports = GENERATE(as<const char*>(), "tcp", "shm", nullptr);
  const char* transport = transports != nullptr ? transports : "default transports";
  CAPTURE(transport);
  constexpr int kFour = 4;
  const braidUniqueId id = braid::testing::NewId();
  braid::testing::CommJob job;
  job.size = kFour;
  job.ranks = braid::testing::Ranks::kProcesses;
  job.config.timeoutMs = kDeathTimeoutMs;
  if (transports != nullptr) job.config.transports = transports;
  job.ids = {id};
  job.timeout_ms = 90000;
  auto results = braid::testing::RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    auto store = braid::testing::ConnectToStore(id);
    if (!store.ok()) return "connecting to the store: " + store.status().message();
    auto barrier = [&](const std::string& key) {
      braid::Status arrived = store.value()->Barrier("faults/" + key, kFour, braid::Deadline::AfterMs(60000));
      return arrived.ok() ? std::string() : "store barrier " + key + ": " + arrived.message();
    };
    if (rank == 0) {
      if (braidCommAbort(comm) != braidSuccess) return "abort failed";
      std::string arrived = barrier("aborted");
      if (!arrived.empty()) return arrived;
      return barrier("survivors-done");  // alive until every survivor has its answer
    }
    std::string arrived = barrier("aborted");
    if (!arrived.empty()) return arrived;
    std::vector<float> send(kFour * 1024, 1.0f), recv(kFour * 1024, 0.0f);
    const auto start = std::chrono::steady_clock::now();
    braidResult_t rc = braidAllToAll(send.data(), recv.data(), 1024, braidFloat32, comm, nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string message = braidGetLastError(comm);
    std::fprintf(stderr, "[%s, first link to an aborted rank] rank %d after %.2f s: %s\n",
                 transport, rank, seconds, message.c_str());
    std::string failure;
    if (rc != braidAborted) {
      failure = "expected braidAborted, got " + std::to_string(rc) + ": " + message;
    } else if (seconds > kDeathBoundSeconds) {
      failure = "noticed only after " + std::to_string(seconds) + " s: " + message;
    } else if (message.rfind("rank 0 aborted (braidCommAbort", 0) != 0) {
      failure = "the error does not lead with rank 0's abort: " + message;
    }
    std::string done = barrier("survivors-done");
    return failure + done;
  });
  for (int rank = 0; rank < kFour; ++rank) {
    INFO("rank " << rank << ": " << results[rank]);
    CHECK(results[rank].empty());
  }
}
