// braidSend / braidRecv and braidGroupStart / braidGroupEnd across ranks.
//
// Covers: blocking pairs; ring exchanges of 8 MiB inside a group in either issue order (without
// the group a rank would sit in its send while its peer sits in its own); all-pairs exchanges;
// transfers to self; groups mixing collectives and point-to-point with issue orders that differ
// between ranks; nested groups; zero-count transfers; a size mismatch, which must fail rather
// than hang; and long runs of small messages, which must arrive in order. Every thread case runs
// over the default transports (shared memory) and over TCP.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

// Value of element i of the message `src` sends `dst` (tagged with `salt` to tell messages apart).
int32_t Value(int src, int dst, size_t i, int salt = 0) {
  return static_cast<int32_t>(src * 1000003 + dst * 7919 + static_cast<int64_t>(i) * 31 +
                              salt * 101);
}

std::vector<int32_t> Message(int src, int dst, size_t count, int salt = 0) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value(src, dst, i, salt);
  return v;
}

std::string Check(const std::vector<int32_t>& got, int src, int dst, int salt = 0) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != Value(src, dst, i, salt)) {
      return "element " + std::to_string(i) + " of the message from rank " + std::to_string(src) +
             " is " + std::to_string(got[i]) + ", expected " +
             std::to_string(Value(src, dst, i, salt));
    }
  }
  return "";
}

// Runs `body(comm, rank, n)` on every rank (threads) with a fresh communicator, once over the
// default transports (shared memory between these ranks) and once over TCP.
std::vector<std::string> OnThreads(int size, int timeout_ms, const CommBody& body) {
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  CommJob job;
  job.size = size;
  job.config.timeoutMs = timeout_ms;
  job.config.transports = transports;
  CAPTURE(Describe(job));
  return RunComms(job, body);
}

#define EXPECT_ALL_OK(results) BRAID_CHECK_RANKS(results)

constexpr size_t kLarge = (size_t{8} << 20) / sizeof(int32_t);  // 8 MiB of int32

}  // namespace

TEST_CASE("blocking send/recv between pairs", "[p2p]") {
  const int size = GENERATE(2, 3, 4);
  CAPTURE(size);
  auto results = OnThreads(size, 60000, [](braidComm_t comm, int rank, int n) -> std::string {
    // Round 1: even ranks send to rank+1; round 2 the other way round. A rank without a partner
    // (odd n) sits out.
    for (int round = 0; round < 2; ++round) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
        bool sender = (rank % 2 == 0) == (round == 0);
        int partner = rank % 2 == 0 ? rank + 1 : rank - 1;
        if (partner >= n) continue;
        if (sender) {
          std::vector<int32_t> data = Message(rank, partner, count, round);
          BRAID_TRY(braidSend(data.data(), count, braidInt32, partner, comm, nullptr), "send");
        } else {
          std::vector<int32_t> data(count, -1);
          BRAID_TRY(braidRecv(data.data(), count, braidInt32, partner, comm, nullptr), "recv");
          std::string wrong = Check(data, partner, rank, round);
          if (!wrong.empty()) return wrong;
        }
      }
    }
    return "";
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("8 MiB ring exchange inside a group, either issue order", "[p2p][group]") {
  const int size = GENERATE(2, 3, 4);
  const bool send_first = GENERATE(true, false);
  CAPTURE(size, send_first);
  auto results = OnThreads(size, 60000, [&](braidComm_t comm, int rank, int n) -> std::string {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<int32_t> out = Message(rank, next, kLarge);
    std::vector<int32_t> in(kLarge, -1);
    // Odd ranks use the other order too, so the two orders meet across a link.
    const bool sends_first = send_first == (rank % 2 == 0);
    BRAID_TRY(braidGroupStart(), "group start");
    if (sends_first) BRAID_TRY(braidSend(out.data(), kLarge, braidInt32, next, comm, nullptr), "send");
    BRAID_TRY(braidRecv(in.data(), kLarge, braidInt32, prev, comm, nullptr), "recv");
    if (!sends_first) BRAID_TRY(braidSend(out.data(), kLarge, braidInt32, next, comm, nullptr), "send");
    BRAID_TRY(braidGroupEnd(), "group end");
    return Check(in, prev, rank);
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("all-pairs exchange, self included, inside a group", "[p2p][group]") {
  const int size = GENERATE(1, 2, 3, 5);
  const size_t count = GENERATE(size_t{3}, size_t{1} << 18);
  CAPTURE(size, count);
  auto results = OnThreads(size, 60000, [&](braidComm_t comm, int rank, int n) -> std::string {
    std::vector<std::vector<int32_t>> out(n), in(n);
    for (int p = 0; p < n; ++p) {
      out[p] = Message(rank, p, count);
      in[p].assign(count, -1);
    }
    BRAID_TRY(braidGroupStart(), "group start");
    // Receives in rank order, sends in reverse: the group must not care.
    for (int p = 0; p < n; ++p)
      BRAID_TRY(braidRecv(in[p].data(), count, braidInt32, p, comm, nullptr), "recv");
    for (int p = n - 1; p >= 0; --p) {
      BRAID_TRY(braidSend(out[p].data(), count, braidInt32, p, comm, nullptr), "send");
    }
    BRAID_TRY(braidGroupEnd(), "group end");
    for (int p = 0; p < n; ++p) {
      std::string wrong = Check(in[p], p, rank);
      if (!wrong.empty()) return wrong;
    }
    return "";
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("send/recv to self inside a group", "[p2p][group]") {
  auto results = OnThreads(3, 60000, [](braidComm_t comm, int rank, int) -> std::string {
    // Two self messages in one group pair up in order.
    std::vector<int32_t> a = Message(rank, rank, 100, 1), b = Message(rank, rank, 50, 2);
    std::vector<int32_t> ra(100, -1), rb(50, -1);
    BRAID_TRY(braidGroupStart(), "group start");
    BRAID_TRY(braidSend(a.data(), a.size(), braidInt32, rank, comm, nullptr), "send a");
    BRAID_TRY(braidRecv(ra.data(), ra.size(), braidInt32, rank, comm, nullptr), "recv a");
    BRAID_TRY(braidRecv(rb.data(), rb.size(), braidInt32, rank, comm, nullptr), "recv b");
    BRAID_TRY(braidSend(b.data(), b.size(), braidInt32, rank, comm, nullptr), "send b");
    BRAID_TRY(braidGroupEnd(), "group end");
    std::string wrong = Check(ra, rank, rank, 1);
    return wrong.empty() ? Check(rb, rank, rank, 2) : wrong;
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("a group mixing collectives and point-to-point, issued in different orders",
          "[p2p][group]") {
  const int size = GENERATE(2, 3, 4);
  CAPTURE(size);
  auto results = OnThreads(size, 60000, [](braidComm_t comm, int rank, int n) -> std::string {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<int32_t> out = Message(rank, next, kLarge / 4), in(kLarge / 4, -1);
    std::vector<int32_t> sum(1000, rank + 1);
    std::vector<int32_t> a2a_send(n * 10), a2a_recv(n * 10, -1);
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < 10; ++i) a2a_send[p * 10 + i] = Value(rank, p, i, 3);
    }
    // Collectives keep the same relative order on every rank (as NCCL requires); the transfers
    // move around them differently on even and odd ranks.
    BRAID_TRY(braidGroupStart(), "group start");
    if (rank % 2 == 0) {
      BRAID_TRY(braidAllReduce(sum.data(), sum.data(), sum.size(), braidInt32, braidSum, comm, nullptr),
          "allreduce");
      BRAID_TRY(braidSend(out.data(), out.size(), braidInt32, next, comm, nullptr), "send");
      BRAID_TRY(braidRecv(in.data(), in.size(), braidInt32, prev, comm, nullptr), "recv");
      BRAID_TRY(braidAllToAll(a2a_send.data(), a2a_recv.data(), 10, braidInt32, comm, nullptr),
          "alltoall");
    } else {
      BRAID_TRY(braidRecv(in.data(), in.size(), braidInt32, prev, comm, nullptr), "recv");
      BRAID_TRY(braidAllReduce(sum.data(), sum.data(), sum.size(), braidInt32, braidSum, comm, nullptr),
          "allreduce");
      BRAID_TRY(braidAllToAll(a2a_send.data(), a2a_recv.data(), 10, braidInt32, comm, nullptr),
          "alltoall");
      BRAID_TRY(braidSend(out.data(), out.size(), braidInt32, next, comm, nullptr), "send");
    }
    BRAID_TRY(braidGroupEnd(), "group end");
    std::string wrong = Check(in, prev, rank);
    if (!wrong.empty()) return wrong;
    const int32_t want = n * (n + 1) / 2;
    for (int32_t v : sum) {
      if (v != want)
        return "allreduce gave " + std::to_string(v) + ", expected " + std::to_string(want);
    }
    for (int s = 0; s < n; ++s) {
      for (int i = 0; i < 10; ++i) {
        if (a2a_recv[s * 10 + i] != Value(s, rank, i, 3)) {
          return "alltoall block " + std::to_string(s) + " element " + std::to_string(i) +
                 " is wrong";
        }
      }
    }
    return "";
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("nested groups run at the outermost end", "[p2p][group]") {
  auto results = OnThreads(2, 60000, [](braidComm_t comm, int rank, int) -> std::string {
    const int peer = 1 - rank;
    std::vector<int32_t> out = Message(rank, peer, kLarge), in(kLarge, -1);
    std::vector<int32_t> small_out = Message(rank, peer, 5, 1), small_in(5, -1);
    BRAID_TRY(braidGroupStart(), "outer group start");
    BRAID_TRY(braidGroupStart(), "inner group start");
    // Both ranks send 8 MiB first: only the outer group's end may run this, with the receive.
    BRAID_TRY(braidSend(out.data(), out.size(), braidInt32, peer, comm, nullptr), "send");
    BRAID_TRY(braidGroupEnd(), "inner group end");
    // Still queued: nothing may have arrived yet.
    if (in[0] != -1) return "the inner braidGroupEnd ran the queued receive";
    BRAID_TRY(braidGroupStart(), "second inner group start");
    BRAID_TRY(braidRecv(in.data(), in.size(), braidInt32, peer, comm, nullptr), "recv");
    BRAID_TRY(braidSend(small_out.data(), small_out.size(), braidInt32, peer, comm, nullptr),
        "send small");
    BRAID_TRY(braidGroupEnd(), "second inner group end");
    BRAID_TRY(braidRecv(small_in.data(), small_in.size(), braidInt32, peer, comm, nullptr), "recv small");
    BRAID_TRY(braidGroupEnd(), "outer group end");
    std::string wrong = Check(in, peer, rank);
    return wrong.empty() ? Check(small_in, peer, rank, 1) : wrong;
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("zero-count transfers complete, alone and in groups", "[p2p][group]") {
  auto results = OnThreads(3, 60000, [](braidComm_t comm, int rank, int n) -> std::string {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    // Blocking, with NULL buffers: rank 0 sends to 1, then 1 to 2.
    if (rank == 0) BRAID_TRY(braidSend(nullptr, 0, braidFloat32, 1, comm, nullptr), "send 0");
    if (rank == 1) BRAID_TRY(braidRecv(nullptr, 0, braidFloat32, 0, comm, nullptr), "recv 0");
    if (rank == 1) BRAID_TRY(braidSend(nullptr, 0, braidFloat32, 2, comm, nullptr), "send 0");
    if (rank == 2) BRAID_TRY(braidRecv(nullptr, 0, braidFloat32, 1, comm, nullptr), "recv 0");
    // In a group, between non-empty messages on the same links: order must still match.
    std::vector<int32_t> a = Message(rank, next, 4, 1), b = Message(rank, next, 4, 2);
    std::vector<int32_t> ra(4, -1), rb(4, -1);
    BRAID_TRY(braidGroupStart(), "group start");
    BRAID_TRY(braidSend(a.data(), 4, braidInt32, next, comm, nullptr), "send a");
    BRAID_TRY(braidSend(nullptr, 0, braidInt32, next, comm, nullptr), "send empty");
    BRAID_TRY(braidSend(b.data(), 4, braidInt32, next, comm, nullptr), "send b");
    BRAID_TRY(braidRecv(ra.data(), 4, braidInt32, prev, comm, nullptr), "recv a");
    BRAID_TRY(braidRecv(nullptr, 0, braidInt32, prev, comm, nullptr), "recv empty");
    BRAID_TRY(braidRecv(rb.data(), 4, braidInt32, prev, comm, nullptr), "recv b");
    BRAID_TRY(braidSend(nullptr, 0, braidInt32, rank, comm, nullptr), "send self empty");
    BRAID_TRY(braidRecv(nullptr, 0, braidInt32, rank, comm, nullptr), "recv self empty");
    BRAID_TRY(braidGroupEnd(), "group end");
    std::string wrong = Check(ra, prev, rank, 1);
    return wrong.empty() ? Check(rb, prev, rank, 2) : wrong;
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("a send/recv size mismatch is an error, not a hang", "[p2p][error]") {
  // Small (one header) and large (held back by flow control) mismatches, both directions.
  const size_t sent = GENERATE(size_t{16}, kLarge);
  const bool receiver_larger = GENERATE(false, true);
  CAPTURE(sent, receiver_larger);
  const size_t expected = receiver_larger ? sent * 2 : sent / 2;
  std::vector<braidResult_t> rcs(2, braidSuccess);
  std::vector<std::string> messages(2);
  auto start = std::chrono::steady_clock::now();
  auto results = OnThreads(2, 3000, [&](braidComm_t comm, int rank, int) -> std::string {
    std::vector<int32_t> buffer(std::max(sent, expected), 7);
    rcs[rank] = rank == 0 ? braidSend(buffer.data(), sent, braidInt32, 1, comm, nullptr)
                          : braidRecv(buffer.data(), expected, braidInt32, 0, comm, nullptr);
    messages[rank] = braidGetLastError(comm);
    return "";
  });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(Failures(results) << "sender: " << rcs[0] << " " << messages[0] << "\nreceiver: " << rcs[1]
                         << " " << messages[1]);
  CHECK(Failures(results).empty());
  CHECK(rcs[1] != braidSuccess);
  CHECK(rcs[1] != braidTimeout);  // found by the mismatch itself, not by waiting out the deadline
  CHECK(seconds < 20);
}

TEST_CASE("1000 small messages arrive in order, blocking and in one group", "[p2p][order]") {
  auto results = OnThreads(2, 60000, [](braidComm_t comm, int rank, int) -> std::string {
    constexpr int kMessages = 1000;
    const int peer = 1 - rank;
    // Blocking: rank 0 sends, rank 1 receives, each message carrying its number.
    for (int i = 0; i < kMessages; ++i) {
      int64_t value = rank == 0 ? i : -1;
      if (rank == 0) {
        BRAID_TRY(braidSend(&value, 1, braidInt64, peer, comm, nullptr), "send " + std::to_string(i));
      } else {
        BRAID_TRY(braidRecv(&value, 1, braidInt64, peer, comm, nullptr), "recv " + std::to_string(i));
        if (value != i) return "message " + std::to_string(i) + " carried " + std::to_string(value);
      }
    }
    // One group each way at once: 1000 sends and 1000 receives per rank.
    std::vector<int64_t> out(kMessages), in(kMessages, -1);
    for (int i = 0; i < kMessages; ++i) out[i] = rank * 100000 + i;
    BRAID_TRY(braidGroupStart(), "group start");
    for (int i = 0; i < kMessages; ++i) {
      BRAID_TRY(braidSend(&out[i], 1, braidInt64, peer, comm, nullptr), "send");
      BRAID_TRY(braidRecv(&in[i], 1, braidInt64, peer, comm, nullptr), "recv");
    }
    BRAID_TRY(braidGroupEnd(), "group end");
    for (int i = 0; i < kMessages; ++i) {
      if (in[i] != peer * 100000 + i) {
        return "grouped message " + std::to_string(i) + " carried " + std::to_string(in[i]);
      }
    }
    return "";
  });
  EXPECT_ALL_OK(results);
}

TEST_CASE("a ring exchange inside a group, ranks as processes", "[p2p][group][processes]") {
  CommJob job;
  job.size = 4;
  job.ranks = Ranks::kProcesses;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<int32_t> out = Message(rank, next, kLarge), in(kLarge, -1);
    BRAID_TRY(braidGroupStart(), "group start");
    BRAID_TRY(braidSend(out.data(), kLarge, braidInt32, next, comm, nullptr), "send");
    BRAID_TRY(braidRecv(in.data(), kLarge, braidInt32, prev, comm, nullptr), "recv");
    BRAID_TRY(braidGroupEnd(), "group end");
    return Check(in, prev, rank);
  });
  EXPECT_ALL_OK(results);
}

}  // namespace braid::testing
