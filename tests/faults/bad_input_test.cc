// Every C entry point against bad input: each case must return the documented error code with a
// message naming the problem; nothing may crash, hang or abort(). Table-driven: one row per
// (call, mistake).
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace {

using braid::testing::NewId;
using braid::testing::OneRankComm;

struct Row {
  const char* call;
  const char* mistake;
  std::function<braidResult_t()> invoke;
  braidResult_t expected;
  const char* message_names;  // substring the last error must contain
};

constexpr auto kBadType = static_cast<braidDataType_t>(42);
constexpr auto kNegType = static_cast<braidDataType_t>(-3);
constexpr auto kBadOp = static_cast<braidRedOp_t>(9);

void RunTable(const std::vector<Row>& rows, braidComm_t comm) {
  for (const Row& row : rows) {
    INFO(row.call << " with " << row.mistake);
    braidResult_t rc = row.invoke();
    CHECK(rc == row.expected);
    std::string message = braidGetLastError(comm);
    std::string thread_message = braidGetLastError(nullptr);
    INFO("last error: " << message << " / thread: " << thread_message);
    CHECK((message.find(row.message_names) != std::string::npos ||
           thread_message.find(row.message_names) != std::string::npos));
  }
}

}  // namespace

TEST_CASE("every entry point rejects bad arguments on a live communicator", "[bad_input]") {
  // `id` only feeds the init rows below; the communicator under test is the fixture's.
  const braidUniqueId id = NewId();
  braidComm_t comm = OneRankComm();
  float x[8] = {};
  const size_t huge = SIZE_MAX / 2;
  int stream_object = 0;
  void* stream = &stream_object;

  std::vector<Row> rows = {
      {"braidGetVersion", "NULL out", [&] { return braidGetVersion(nullptr); }, braidInvalidArgument, "version"},
      {"braidGetUniqueId", "NULL out", [&] { return braidGetUniqueId(nullptr); }, braidInvalidArgument, "uniqueId"},
      {"braidCommInitRank", "NULL comm", [&] { return braidCommInitRank(nullptr, 1, id, 0); }, braidInvalidArgument, "comm"},
      {"braidCommInitRank", "nranks 0", [&] { braidComm_t c; return braidCommInitRank(&c, 0, id, 0); }, braidInvalidArgument, "nranks"},
      {"braidCommInitRank", "rank = nranks", [&] { braidComm_t c; return braidCommInitRank(&c, 3, id, 3); }, braidInvalidArgument, "rank 3"},
      {"braidCommInitEnv", "NULL comm", [&] { return braidCommInitEnv(nullptr, nullptr); }, braidInvalidArgument, "comm"},
      {"braidCommSplit", "NULL newcomm", [&] { return braidCommSplit(comm, 0, 0, nullptr, nullptr); }, braidInvalidArgument, "newcomm"},
      {"braidCommCount", "NULL out", [&] { return braidCommCount(comm, nullptr); }, braidInvalidArgument, "count"},
      {"braidCommUserRank", "NULL out", [&] { return braidCommUserRank(comm, nullptr); }, braidInvalidArgument, "rank"},
      {"braidCommCuDevice", "NULL out", [&] { return braidCommCuDevice(comm, nullptr); }, braidInvalidArgument, "device"},
      {"braidCommGetAsyncError", "NULL out", [&] { return braidCommGetAsyncError(comm, nullptr); }, braidInvalidArgument, "asyncError"},

      {"braidAllReduce", "NULL sendbuff", [&] { return braidAllReduce(nullptr, x, 8, braidFloat32, braidSum, comm, nullptr); }, braidInvalidArgument, "sendbuff"},
      {"braidAllReduce", "datatype 42", [&] { return braidAllReduce(x, x, 8, kBadType, braidSum, comm, nullptr); }, braidInvalidArgument, "datatype 42"},
      {"braidAllReduce", "datatype -3", [&] { return braidAllReduce(x, x, 8, kNegType, braidSum, comm, nullptr); }, braidInvalidArgument, "datatype -3"},
      {"braidAllReduce", "op 9", [&] { return braidAllReduce(x, x, 8, braidFloat32, kBadOp, comm, nullptr); }, braidInvalidArgument, "op 9"},
      {"braidAllReduce", "byte size overflow", [&] { return braidAllReduce(x, x, huge, braidFloat64, braidSum, comm, nullptr); }, braidInvalidArgument, "overflows"},
      {"braidAllReduce", "a stream with host buffers", [&] { return braidAllReduce(x, x, 8, braidFloat32, braidSum, comm, stream); }, braidInvalidUsage, "stream"},
      {"braidBroadcast", "root 1 of 1", [&] { return braidBroadcast(x, x, 8, braidFloat32, 1, comm, nullptr); }, braidInvalidArgument, "root 1"},
      {"braidBroadcast", "NULL recvbuff", [&] { return braidBroadcast(x, nullptr, 8, braidFloat32, 0, comm, nullptr); }, braidInvalidArgument, "recvbuff"},
      {"braidReduce", "root -1", [&] { return braidReduce(x, x, 8, braidFloat32, braidSum, -1, comm, nullptr); }, braidInvalidArgument, "root -1"},
      {"braidReduce", "op 9", [&] { return braidReduce(x, x, 8, braidFloat32, kBadOp, 0, comm, nullptr); }, braidInvalidArgument, "op 9"},
      {"braidAllGather", "NULL recvbuff", [&] { return braidAllGather(x, nullptr, 8, braidFloat32, comm, nullptr); }, braidInvalidArgument, "recvbuff"},
      {"braidAllGather", "byte size overflow", [&] { return braidAllGather(x, x, huge, braidInt32, comm, nullptr); }, braidInvalidArgument, "overflows"},
      {"braidReduceScatter", "datatype 42", [&] { return braidReduceScatter(x, x, 1, kBadType, braidSum, comm, nullptr); }, braidInvalidArgument, "datatype"},
      {"braidReduceScatter", "NULL sendbuff", [&] { return braidReduceScatter(nullptr, x, 1, braidFloat32, braidSum, comm, nullptr); }, braidInvalidArgument, "sendbuff"},
      {"braidAllToAll", "NULL sendbuff", [&] { return braidAllToAll(nullptr, x, 1, braidFloat32, comm, nullptr); }, braidInvalidArgument, "sendbuff"},
      {"braidGather", "root 5", [&] { return braidGather(x, x, 1, braidFloat32, 5, comm, nullptr); }, braidInvalidArgument, "root 5"},
      {"braidScatter", "NULL recvbuff", [&] { return braidScatter(x, nullptr, 1, braidFloat32, 0, comm, nullptr); }, braidInvalidArgument, "recvbuff"},
      {"braidSend", "peer 1 of 1", [&] { return braidSend(x, 1, braidFloat32, 1, comm, nullptr); }, braidInvalidArgument, "peer 1"},
      {"braidSend", "NULL sendbuff", [&] { return braidSend(nullptr, 1, braidFloat32, 0, comm, nullptr); }, braidInvalidArgument, "sendbuff"},
      {"braidRecv", "peer -2", [&] { return braidRecv(x, 1, braidFloat32, -2, comm, nullptr); }, braidInvalidArgument, "peer -2"},
      {"braidRecv", "datatype 42", [&] { return braidRecv(x, 1, kBadType, 0, comm, nullptr); }, braidInvalidArgument, "datatype"},
      {"braidRecvAny", "NULL peer", [&] { return braidRecvAny(x, 1, braidFloat32, nullptr, comm, nullptr); }, braidInvalidArgument, "peer"},
      {"braidRecvAny", "NULL recvbuff", [&] { int p; return braidRecvAny(nullptr, 1, braidFloat32, &p, comm, nullptr); }, braidInvalidArgument, "recvbuff"},
      {"braidRecvAny", "datatype 42", [&] { int p; return braidRecvAny(x, 1, kBadType, &p, comm, nullptr); }, braidInvalidArgument, "datatype"},
      {"braidRecvAny", "a stream with host buffers", [&] { int p; return braidRecvAny(x, 1, braidFloat32, &p, comm, stream); }, braidInvalidUsage, "stream"},
      {"braidRecvAny", "nobody to receive from", [&] { int p; return braidRecvAny(x, 1, braidFloat32, &p, comm, nullptr); }, braidInvalidUsage, "no other rank"},
      {"braidBarrier", "a stream", [&] { return braidBarrier(comm, stream); }, braidInvalidUsage, "stream"},
      {"braidGroupEnd", "no group open", [&] { return braidGroupEnd(); }, braidInvalidUsage, "braidGroupStart"},
  };
  RunTable(rows, comm);

  // The communicator survived every one of those.
  x[0] = 2;
  CHECK(braidAllReduce(x, x, 1, braidFloat32, braidProd, comm, nullptr) == braidSuccess);
  CHECK(x[0] == 2.0f);
  CHECK(braidCommDestroy(comm) == braidSuccess);
}

TEST_CASE("NULL, destroyed and aborted communicators are reported", "[bad_input]") {
  // Both made before one is destroyed: a handle made after a destroy may be given the freed
  // address back by the allocator, and is then live again (as with any C handle).
  braidComm_t destroyed = OneRankComm();
  braidComm_t aborted = OneRankComm();
  REQUIRE(destroyed != aborted);
  REQUIRE(braidCommDestroy(destroyed) == braidSuccess);
  REQUIRE(braidCommAbort(aborted) == braidSuccess);
  float x[4] = {};
  int n = 0;
  braidComm_t out = nullptr;

  for (braidComm_t comm : {static_cast<braidComm_t>(nullptr), destroyed}) {
    const braidResult_t expected = comm == nullptr ? braidInvalidArgument : braidInvalidUsage;
    const char* names = comm == nullptr ? "comm is NULL" : "live communicator";
    std::vector<Row> rows = {
        {"braidCommCount", "bad comm", [&] { return braidCommCount(comm, &n); }, expected, names},
        {"braidCommUserRank", "bad comm", [&] { return braidCommUserRank(comm, &n); }, expected, names},
        {"braidCommCuDevice", "bad comm", [&] { return braidCommCuDevice(comm, &n); }, expected, names},
        {"braidCommFinalize", "bad comm", [&] { return braidCommFinalize(comm); }, expected, names},
        {"braidCommAbort", "bad comm", [&] { return braidCommAbort(comm); }, expected, names},
        {"braidCommDestroy", "bad comm", [&] { return braidCommDestroy(comm); }, expected, comm == nullptr ? "comm is NULL" : "live communicator"},
        {"braidCommSplit", "bad comm", [&] { return braidCommSplit(comm, 0, 0, &out, nullptr); }, expected, names},
        {"braidAllReduce", "bad comm", [&] { return braidAllReduce(x, x, 4, braidFloat32, braidSum, comm, nullptr); }, expected, names},
        {"braidBroadcast", "bad comm", [&] { return braidBroadcast(x, x, 4, braidFloat32, 0, comm, nullptr); }, expected, names},
        {"braidReduce", "bad comm", [&] { return braidReduce(x, x, 4, braidFloat32, braidSum, 0, comm, nullptr); }, expected, names},
        {"braidAllGather", "bad comm", [&] { return braidAllGather(x, x, 1, braidFloat32, comm, nullptr); }, expected, names},
        {"braidReduceScatter", "bad comm", [&] { return braidReduceScatter(x, x, 1, braidFloat32, braidSum, comm, nullptr); }, expected, names},
        {"braidAllToAll", "bad comm", [&] { return braidAllToAll(x, x, 1, braidFloat32, comm, nullptr); }, expected, names},
        {"braidGather", "bad comm", [&] { return braidGather(x, x, 1, braidFloat32, 0, comm, nullptr); }, expected, names},
        {"braidScatter", "bad comm", [&] { return braidScatter(x, x, 1, braidFloat32, 0, comm, nullptr); }, expected, names},
        {"braidSend", "bad comm", [&] { return braidSend(x, 1, braidFloat32, 0, comm, nullptr); }, expected, names},
        {"braidRecv", "bad comm", [&] { return braidRecv(x, 1, braidFloat32, 0, comm, nullptr); }, expected, names},
        {"braidRecvAny", "bad comm", [&] { return braidRecvAny(x, 1, braidFloat32, &n, comm, nullptr); }, expected, names},
        {"braidBarrier", "bad comm", [&] { return braidBarrier(comm, nullptr); }, expected, names},
    };
    RunTable(rows, nullptr);
  }

  // An aborted communicator answers queries but refuses work with braidAborted.
  CHECK(braidCommCount(aborted, &n) == braidSuccess);
  CHECK(braidAllReduce(x, x, 4, braidFloat32, braidSum, aborted, nullptr) == braidAborted);
  CHECK(std::string(braidGetLastError(aborted)).find("abort") != std::string::npos);
  CHECK(braidBarrier(aborted, nullptr) == braidAborted);
  CHECK(braidRecvAny(x, 1, braidFloat32, &n, aborted, nullptr) == braidAborted);
  CHECK(n == -1);
  braidResult_t async = braidSuccess;
  CHECK(braidCommGetAsyncError(aborted, &async) == braidSuccess);
  CHECK(async == braidAborted);
  CHECK(braidCommDestroy(aborted) == braidSuccess);
}

TEST_CASE("a bad config is refused with the field named", "[bad_input]") {
  // The init under test is braidCommInitRankConfig's own, so it is called directly.
  const braidUniqueId id = NewId();
  braidComm_t comm = nullptr;
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.chunkBytes = 3;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(std::string(braidGetLastError(nullptr)).find("chunkBytes") != std::string::npos);
  config = BRAID_CONFIG_INITIALIZER;
  config.size = 8;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(std::string(braidGetLastError(nullptr)).find("size") != std::string::npos);
  config = BRAID_CONFIG_INITIALIZER;
  config.transports = "carrier-pigeon";
  CHECK(braidCommInitRankConfig(&comm, 2, id, 0, &config) == braidInvalidArgument);
  CHECK(std::string(braidGetLastError(nullptr)).find("carrier-pigeon") != std::string::npos);
  CHECK(comm == nullptr);
}
