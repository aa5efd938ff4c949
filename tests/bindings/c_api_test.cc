// The C API's contract: every entry point checks its arguments and names the bad one, misuse of
// a communicator is reported rather than crashing, and launch mistakes (missing ranks, ranks
// that disagree on nranks, two callers claiming one rank) fail with an error that says which.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <future>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"
#include "tests/harness/free_port.h"
#include "tests/harness/multi_rank.h"

namespace {

bool Contains(const char* text, const std::string& needle) {
  return std::string(text).find(needle) != std::string::npos;
}

using braid::testing::CommJob;
using braid::testing::FreePort;
using braid::testing::NewId;
using braid::testing::OneRankComm;
using braid::testing::RunComms;
using braid::testing::RunThreads;

}  // namespace

TEST_CASE("version and error strings", "[capi]") {
  int version = 0;
  CHECK(braidGetVersion(&version) == braidSuccess);
  CHECK(version == BRAID_VERSION_CODE);
  CHECK(braidGetVersion(nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "version"));
  for (int r = 0; r <= braidNumResults; ++r) {
    CHECK(std::strlen(braidGetErrorString(static_cast<braidResult_t>(r))) > 0);
  }
}

TEST_CASE("init rejects bad arguments and names them", "[capi]") {
  braidUniqueId id = NewId();
  braidComm_t comm = nullptr;
  CHECK(braidCommInitRank(nullptr, 1, id, 0) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "comm"));
  CHECK(braidCommInitRank(&comm, 0, id, 0) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "nranks"));
  CHECK(braidCommInitRank(&comm, 2, id, 2) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "rank 2"));
  CHECK(braidCommInitRank(&comm, 2, id, -1) == braidInvalidArgument);

  braidUniqueId garbage;
  std::memset(&garbage, 0x42, sizeof(garbage));
  CHECK(braidCommInitRank(&comm, 1, garbage, 0) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "magic"));
  CHECK(comm == nullptr);

  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.magic = 0;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "BRAID_CONFIG_INITIALIZER"));
  config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = -5;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "timeoutMs"));
  config = BRAID_CONFIG_INITIALIZER;
  config.splitShare = 2;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "splitShare"));
  CHECK(braidGetUniqueId(nullptr) == braidInvalidArgument);
}

TEST_CASE("a one-rank communicator answers queries and allreduces", "[capi]") {
  braidComm_t comm = OneRankComm();
  int count = 0, rank = -1, device = 0;
  CHECK(braidCommCount(comm, &count) == braidSuccess);
  CHECK(count == 1);
  CHECK(braidCommUserRank(comm, &rank) == braidSuccess);
  CHECK(rank == 0);
  CHECK(braidCommCuDevice(comm, &device) == braidSuccess);
  CHECK(device == -1);
  CHECK(braidCommCount(comm, nullptr) == braidInvalidArgument);

  std::vector<double> in = {1.5, -2, 3}, out(3, 0);
  CHECK(braidAllReduce(in.data(), out.data(), 3, braidFloat64, braidAvg, comm, nullptr) == braidSuccess);
  CHECK(out == in);
  braidResult_t async = braidInternalError;
  CHECK(braidCommGetAsyncError(comm, &async) == braidSuccess);
  CHECK(async == braidSuccess);
  CHECK(braidCommFinalize(comm) == braidSuccess);
  CHECK(braidAllReduce(in.data(), out.data(), 3, braidFloat64, braidSum, comm, nullptr) == braidInvalidUsage);
  CHECK(Contains(braidGetLastError(comm), "finalized"));
  CHECK(braidCommDestroy(comm) == braidSuccess);
}

TEST_CASE("allreduce rejects bad arguments without touching the communicator", "[capi]") {
  braidComm_t comm = OneRankComm();
  float x[4] = {1, 2, 3, 4};
  struct Case {
    const char* what;
    braidResult_t rc;
    const char* names;
  };
  std::vector<Case> cases = {
      {"null sendbuff", braidAllReduce(nullptr, x, 4, braidFloat32, braidSum, comm, nullptr), "sendbuff"},
      {"null recvbuff", braidAllReduce(x, nullptr, 4, braidFloat32, braidSum, comm, nullptr), "recvbuff"},
      {"datatype high", braidAllReduce(x, x, 4, static_cast<braidDataType_t>(10), braidSum, comm, nullptr), "datatype"},
      {"datatype negative", braidAllReduce(x, x, 4, static_cast<braidDataType_t>(-1), braidSum, comm, nullptr), "datatype"},
      {"op high", braidAllReduce(x, x, 4, braidFloat32, static_cast<braidRedOp_t>(5), comm, nullptr), "op"},
      {"byte size overflow", braidAllReduce(x, x, SIZE_MAX / 2, braidFloat32, braidSum, comm, nullptr), "overflows"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CHECK(c.rc == braidInvalidArgument);
  }
  // Each call overwrites the last error, so messages are checked one call at a time.
  CHECK(braidAllReduce(nullptr, x, 4, braidFloat32, braidSum, comm, nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(comm), "sendbuff"));
  CHECK(braidAllReduce(x, x, 4, static_cast<braidDataType_t>(10), braidSum, comm, nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(comm), "datatype"));
  CHECK(braidAllReduce(x, x, SIZE_MAX / 2, braidFloat32, braidSum, comm, nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(comm), "overflows"));
  int fake_stream = 0;
  CHECK(braidAllReduce(x, x, 4, braidFloat32, braidSum, comm, &fake_stream) == braidInvalidUsage);
  CHECK(Contains(braidGetLastError(comm), "stream"));
  // count 0 with NULL buffers is legal.
  CHECK(braidAllReduce(nullptr, nullptr, 0, braidFloat32, braidSum, comm, nullptr) == braidSuccess);
  // The communicator still works after all that.
  CHECK(braidAllReduce(x, x, 4, braidFloat32, braidMax, comm, nullptr) == braidSuccess);
  CHECK(x[3] == 4.0f);
  CHECK(braidCommDestroy(comm) == braidSuccess);
}

TEST_CASE("a handle used, destroyed, then used again is reported dead, on this and other threads",
          "[capi]") {
  // The live-handle check remembers the last live handle per thread: a destroy must end that.
  float x = 1;
  int n = 0;
  braidComm_t comm = OneRankComm();
  braidComm_t other = OneRankComm();
  REQUIRE(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) == braidSuccess);
  REQUIRE(braidCommCount(comm, &n) == braidSuccess);  // this thread now remembers `comm`
  // Another thread that checked `comm` before the destroy and checks it again after.
  std::promise<braidResult_t> before, after;
  std::promise<void> destroyed;
  std::thread other_thread([&] {
    int m = 0;
    before.set_value(braidCommCount(comm, &m));
    destroyed.get_future().wait();
    after.set_value(braidCommCount(comm, &m));
  });
  CHECK(before.get_future().get() == braidSuccess);
  REQUIRE(braidCommDestroy(comm) == braidSuccess);
  destroyed.set_value();
  CHECK(after.get_future().get() == braidInvalidUsage);
  other_thread.join();
  CHECK(braidCommCount(comm, &n) == braidInvalidUsage);
  CHECK(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) == braidInvalidUsage);
  // Destroying one handle does not make another one look dead.
  CHECK(braidCommCount(other, &n) == braidSuccess);
  CHECK(n == 1);
  CHECK(braidCommDestroy(other) == braidSuccess);
  CHECK(braidCommCount(other, &n) == braidInvalidUsage);
}

TEST_CASE("a NULL or destroyed communicator is reported, not dereferenced", "[capi]") {
  float x = 1;
  int n = 0;
  CHECK(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, nullptr, nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "comm is NULL"));
  braidComm_t comm = OneRankComm();
  CHECK(braidCommDestroy(comm) == braidSuccess);
  CHECK(braidCommDestroy(comm) == braidInvalidUsage);
  CHECK(braidCommCount(comm, &n) == braidInvalidUsage);
  CHECK(Contains(braidGetLastError(nullptr), "live communicator"));
  CHECK(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr) == braidInvalidUsage);
  CHECK(braidCommAbort(nullptr) == braidInvalidArgument);
}

TEST_CASE("group, split and point-to-point misuse is reported", "[capi]") {
  braidComm_t comm = OneRankComm();
  CHECK(braidGroupEnd() == braidInvalidUsage);
  CHECK(Contains(braidGetLastError(nullptr), "without a matching braidGroupStart"));
  braidComm_t child = reinterpret_cast<braidComm_t>(0x1);
  CHECK(braidCommSplit(comm, -7, 0, &child, nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(comm), "color -7"));
  CHECK(child == nullptr);
  CHECK(braidCommSplit(comm, 0, 0, nullptr, nullptr) == braidInvalidArgument);
  float x = 1;
  CHECK(braidSend(&x, 1, braidFloat32, 1, comm, nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(comm), "peer 1"));
  CHECK(braidBroadcast(&x, &x, 1, braidFloat32, -1, comm, nullptr) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(comm), "root -1"));
  // A lone send to itself cannot complete; inside a group with its receive it is a copy.
  CHECK(braidSend(&x, 1, braidFloat32, 0, comm, nullptr) == braidInvalidUsage);
  float y = 0;
  CHECK(braidGroupStart() == braidSuccess);
  CHECK(braidRecv(&y, 1, braidFloat32, 0, comm, nullptr) == braidSuccess);
  CHECK(braidSend(&x, 1, braidFloat32, 0, comm, nullptr) == braidSuccess);
  CHECK(braidGroupEnd() == braidSuccess);
  CHECK(y == 1.0f);
  CHECK(braidCommDestroy(comm) == braidSuccess);
}

// Init is what these tests check, so ranks call it themselves, on the harness's rank threads.
TEST_CASE("a rank that never arrives is named in every other rank's error", "[capi][rendezvous]") {
  braidUniqueId id = NewId();
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = 1500;
  // Ranks 0 and 2 of 4 arrive; 1 and 3 never do.
  std::vector<braidResult_t> rcs(2, braidSuccess);
  std::vector<std::string> messages(2);
  auto results = RunThreads(2, [&](int i, int) -> std::string {
    braidComm_t comm = nullptr;
    rcs[i] = braidCommInitRankConfig(&comm, 4, id, i * 2, &config);
    messages[i] = braidGetLastError(nullptr);
    if (comm != nullptr) braidCommDestroy(comm);
    return "";
  });
  REQUIRE(braid::testing::Failures(results).empty());
  for (int i = 0; i < 2; ++i) {
    INFO(messages[i]);
    CHECK(rcs[i] == braidTimeout);
    CHECK(Contains(messages[i].c_str(), "missing ranks: 1, 3"));
  }
}

TEST_CASE("ranks that disagree on nranks, or share a rank, are told so", "[capi][rendezvous]") {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = 1500;
  SECTION("nranks disagreement") {
    braidUniqueId id = NewId();
    auto results = RunThreads(2, [&](int rank, int) -> std::string {
      braidComm_t comm = nullptr;
      braidResult_t rc = braidCommInitRankConfig(&comm, rank == 0 ? 2 : 3, id, rank, &config);
      if (comm) braidCommDestroy(comm);
      return rc == braidSuccess ? "" : braidGetLastError(nullptr);
    });
    bool named = Contains(results[0].c_str(), "nranks") || Contains(results[1].c_str(), "nranks");
    INFO(braid::testing::Failures(results));
    CHECK(named);
  }
  SECTION("two callers claim rank 0") {
    braidUniqueId id = NewId();
    auto results = RunThreads(2, [&](int, int) -> std::string {
      braidComm_t comm = nullptr;
      braidResult_t rc = braidCommInitRankConfig(&comm, 2, id, 0, &config);
      if (comm) braidCommDestroy(comm);
      return rc == braidSuccess ? "" : braidGetLastError(nullptr);
    });
    bool named = Contains(results[0].c_str(), "more than one") ||
                 Contains(results[1].c_str(), "more than one");
    INFO(braid::testing::Failures(results));
    CHECK(named);
  }
}

TEST_CASE("braidCommAbort wakes a blocked allreduce within 1 s, on every transport", "[capi][abort]") {
  const char* transports = GENERATE("tcp", "shm");
  CAPTURE(transports);
  CommJob job;
  job.config.transports = transports;
  job.timeout_ms = 60000;
  // Rank 0 enters an allreduce that rank 1 never joins; rank 1's thread aborts rank 0's
  // communicator, then keeps its own alive until rank 0 has returned (its destroy would otherwise
  // fail rank 0 with a lost link instead).
  std::atomic<braidComm_t> blocked_comm{nullptr};
  std::atomic<bool> returned{false};
  std::atomic<int64_t> aborted_ns{0}, returned_ns{0};
  braidResult_t abort_rc = braidInternalError, rc = braidSuccess, later_rc = braidSuccess;
  braidResult_t async_rc = braidInternalError, async = braidSuccess;
  std::string message;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 0) {
      std::vector<float> data(1024, 1.0f);
      blocked_comm = comm;
      rc = braidAllReduce(data.data(), data.data(), data.size(), braidFloat32, braidSum, comm, nullptr);
      returned_ns = std::chrono::steady_clock::now().time_since_epoch().count();
      message = braidGetLastError(comm);
      async_rc = braidCommGetAsyncError(comm, &async);
      // Later calls fail at once.
      later_rc = braidAllReduce(data.data(), data.data(), 4, braidFloat32, braidSum, comm, nullptr);
      returned = true;
      return "";
    }
    while (blocked_comm.load() == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    aborted_ns = std::chrono::steady_clock::now().time_since_epoch().count();
    abort_rc = braidCommAbort(blocked_comm.load());
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!returned && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return returned ? "" : "rank 0 was still blocked 20 s after the abort";
  });
  // Both communicators were then destroyed by the fixture, which reports a failed destroy.
  BRAID_CHECK_RANKS(results);
  CHECK(abort_rc == braidSuccess);
  CHECK(rc == braidAborted);
  CHECK((returned_ns.load() - aborted_ns.load()) / 1e9 < 1.0);
  CHECK(Contains(message.c_str(), "abort"));
  CHECK(async_rc == braidSuccess);
  CHECK(async == braidAborted);
  CHECK(later_rc == braidAborted);
}

TEST_CASE("env:// init in separate processes, rank 0 hosting the store", "[capi][env]") {
  const int port = FreePort();
  auto results = braid::testing::RunProcesses(
      3,
      [&](int rank, int size) -> std::string {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
        setenv("BRAID_SECRET", "env-test-secret", 1);
        unsetenv("BRAID_STORE_HOSTED");
        braidComm_t comm = nullptr;
        if (braidCommInitEnv(&comm, nullptr) != braidSuccess) {
          return std::string("init: ") + braidGetLastError(nullptr);
        }
        int got_rank = -1, got_size = -1;
        braidCommUserRank(comm, &got_rank);
        braidCommCount(comm, &got_size);
        if (got_rank != rank || got_size != size) return "rank/size mismatch";
        int64_t value = rank + 1;
        if (braidAllReduce(&value, &value, 1, braidInt64, braidSum, comm, nullptr) != braidSuccess) {
          return std::string("allreduce: ") + braidGetLastError(comm);
        }
        braidCommDestroy(comm);
        return value == 6 ? "" : "sum is " + std::to_string(value) + ", expected 6";
      },
      60000);
  INFO(braid::testing::Failures(results));
  CHECK(braid::testing::Failures(results).empty());
}
