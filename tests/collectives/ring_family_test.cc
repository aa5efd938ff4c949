// The ring family (allgather and reducescatter "ring"; broadcast and reduce "ring", the pipelined
// chains) against the serial reference.
//
// tests/collectives/BUILD forces the ring with env = {"BRAID_ALGO": ...} (read once per process).
// Every collective runs world sizes 1, 2, 3, 4, 5 and 8 as threads and some as processes; counts 0,
// 1 and 1021 (prime) for every dtype x op x in/out of place x root, the large count 262147 (prime)
// for float32 and int8 x every op, and a tiny-chunk variant (4 KiB) on a mid-size prime count so
// every message stream runs many pipelined slices. Out of place, sendbuff must come back unchanged
// and nothing may be written past recvbuff; a non-root's sendbuff (reduce in place) must stay
// untouched; non-roots pass NULL for the buffer NCCL says they do not use. Rank results are
// strings (only the main thread talks to Catch2).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "bindings/c/braid.h"
#include "tests/collectives/reference.h"
#include "tests/harness/multi_rank.h"

namespace braid::testing {
namespace {

constexpr size_t kLargeCount = (size_t{1} << 18) + 3;  // 262147, prime
constexpr size_t kMidCount = 30011;                    // prime; dozens of 4 KiB slices
constexpr int kDefaultChunk = 512 * 1024;
constexpr int kTinyChunk = 4096;
constexpr unsigned char kGuard = 0x5A;

enum class Kind { kAllGather, kReduceScatter, kBroadcast, kReduce };

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kAllGather: return "allgather";
    case Kind::kReduceScatter: return "reducescatter";
    case Kind::kBroadcast: return "broadcast";
    default: return "reduce";
  }
}
bool Reduces(Kind kind) { return kind == Kind::kReduceScatter || kind == Kind::kReduce; }
bool Rooted(Kind kind) { return kind == Kind::kBroadcast || kind == Kind::kReduce; }

struct Sweep {
  int chunk_bytes = kDefaultChunk;
  std::vector<size_t> counts;
};
Sweep DefaultSweep() { return Sweep{kDefaultChunk, {0, 1, 1021, kLargeCount}}; }
Sweep PipelinedSweep() { return Sweep{kTinyChunk, {kMidCount}}; }

// Large counts run float32 and int8 only; everything else runs every dtype.
bool Selected(size_t count, braidDataType_t type) {
  return count < kLargeCount || type == braidFloat32 || type == braidInt8;
}

std::string Describe(Kind kind, braidDataType_t type, braidRedOp_t op, size_t count, bool in_place,
                     int root) {
  std::string s = std::string(KindName(kind)) + " " + TypeName(type);
  if (Reduces(kind)) s += std::string(" ") + OpName(op);
  s += " count " + std::to_string(count) + (in_place ? " in place" : " out of place");
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

// The first `bytes` of rank's input for (type, op): what it contributes.
std::vector<char> Input(braidDataType_t type, braidRedOp_t op, int rank, size_t count) {
  std::vector<char> v = MakeInput(type, op, rank, count);
  v.resize(count * TypeSize(type));
  return v;
}

// One call of `kind` on this rank, checked; "" or what went wrong.
std::string RunOne(braidComm_t comm, Kind kind, int rank, int size, braidDataType_t type,
                   braidRedOp_t op, size_t count, bool in_place, int root) {
  const size_t elem = TypeSize(type);
  const size_t n = static_cast<size_t>(size);
  // Buffers carry one guard byte past their end.
  auto buffer = [&](size_t elems) { return std::vector<char>(elems * elem + 1, kGuard); };
  auto guarded = [&](const std::vector<char>& data) {
    std::vector<char> v = data;
    v.push_back(static_cast<char>(kGuard));
    return v;
  };
  std::vector<char> send, recv, original;
  auto unchanged = [&](const std::vector<char>& v) {
    return std::memcmp(v.data(), original.data(), original.size()) == 0;
  };
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  braidResult_t rc = braidSuccess;
  std::string wrong;

  switch (kind) {
    case Kind::kAllGather: {
      original = Input(type, braidSum, rank, count);
      recv = buffer(n * count);
      if (in_place) {
        std::memcpy(recv.data() + rank * count * elem, original.data(), count * elem);
        sendbuff = recv.data() + rank * count * elem;
      } else {
        send = guarded(original);
        sendbuff = send.data();
      }
      rc = braidAllGather(sendbuff, recv.data(), count, type, comm, nullptr);
      if (rc != braidSuccess) break;
      for (int r = 0; r < size && wrong.empty(); ++r) {
        std::vector<char> block = Input(type, braidSum, r, count);
        wrong = FirstDifference(type, block.data(), recv.data() + r * count * elem, count);
        if (!wrong.empty()) wrong = "block " + std::to_string(r) + ": " + wrong;
      }
      if (wrong.empty() && !send.empty() && !unchanged(send)) wrong = "sendbuff was modified";
      break;
    }
    case Kind::kReduceScatter: {
      original = Input(type, op, rank, n * count);
      send = guarded(original);
      if (in_place) {
        recvbuff = send.data() + rank * count * elem;
      } else {
        recv = buffer(count);
        recvbuff = recv.data();
      }
      rc = braidReduceScatter(send.data(), recvbuff, count, type, op, comm, nullptr);
      if (rc != braidSuccess) break;
      wrong = CheckReducedRange(type, op, size, recvbuff, rank * count, count);
      if (wrong.empty() && !in_place && !unchanged(send)) wrong = "sendbuff was modified";
      break;
    }
    case Kind::kBroadcast: {
      const bool is_root = rank == root;
      original = Input(type, braidSum, root, count);
      recv = buffer(count);
      if (in_place) {
        if (is_root) std::memcpy(recv.data(), original.data(), original.size());
        sendbuff = recv.data();
      } else if (is_root) {
        send = guarded(original);
        sendbuff = send.data();
      }  // non-roots pass NULL: only the root reads sendbuff
      rc = braidBroadcast(sendbuff, recv.data(), count, type, root, comm, nullptr);
      if (rc != braidSuccess) break;
      wrong = FirstDifference(type, original.data(), recv.data(), count);
      if (wrong.empty() && !send.empty() && !unchanged(send)) wrong = "sendbuff was modified";
      break;
    }
    case Kind::kReduce: {
      const bool is_root = rank == root;
      original = Input(type, op, rank, count);
      send = guarded(original);
      if (in_place) {
        recvbuff = send.data();
      } else if (is_root) {
        recv = buffer(count);
        recvbuff = recv.data();
      }  // non-roots pass NULL: only the root writes recvbuff
      rc = braidReduce(send.data(), recvbuff, count, type, op, root, comm, nullptr);
      if (rc != braidSuccess) break;
      if (is_root) wrong = CheckReduced(type, op, size, recvbuff, count);
      // Out of place nobody's sendbuff may change; in place a non-root's is input only.
      if (wrong.empty() && (!in_place || !is_root) && !unchanged(send)) {
        wrong = "sendbuff was modified";
      }
      break;
    }
  }
  if (rc != braidSuccess) {
    return Describe(kind, type, op, count, in_place, Rooted(kind) ? root : -1) + ": " +
           braidGetErrorString(rc) + ": " + braidGetLastError(comm);
  }
  for (const std::vector<char>* v : {&send, &recv}) {
    if (wrong.empty() && !v->empty() && static_cast<unsigned char>(v->back()) != kGuard) {
      wrong = "wrote past the end of a buffer";
    }
  }
  if (wrong.empty()) return "";
  return Describe(kind, type, op, count, in_place, Rooted(kind) ? root : -1) + ": " + wrong;
}

// The whole sweep of `kind` on one rank; "" or the first failure.
std::string SweepRank(Kind kind, int rank, int size, const braidUniqueId& id, const Sweep& sweep) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.chunkBytes = sweep.chunk_bytes;
  config.timeoutMs = 120000;
  braidComm_t comm = nullptr;
  if (braidCommInitRankConfig(&comm, size, id, rank, &config) != braidSuccess) {
    return std::string("init failed: ") + braidGetLastError(nullptr);
  }
  std::string failure;
  const int ops = Reduces(kind) ? braidNumOps : 1;
  const int roots = Rooted(kind) ? size : 1;
  for (size_t count : sweep.counts) {
    for (int t = 0; t < braidNumTypes && failure.empty(); ++t) {
      const auto type = static_cast<braidDataType_t>(t);
      if (!Selected(count, type)) continue;
      for (int o = 0; o < ops && failure.empty(); ++o) {
        for (int root = 0; root < roots && failure.empty(); ++root) {
          for (bool in_place : {false, true}) {
            failure = RunOne(comm, kind, rank, size, type, static_cast<braidRedOp_t>(o), count,
                             in_place, root);
            if (!failure.empty()) break;
          }
        }
      }
    }
  }
  braidCommDestroy(comm);
  return failure;
}

braidUniqueId NewId() {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  return id;
}

void RunThreadSweep(Kind kind) {
  const int size = GENERATE(1, 2, 3, 4, 5, 8);
  const bool pipelined = GENERATE(false, true);
  CAPTURE(size, pipelined);
  const Sweep sweep = pipelined ? PipelinedSweep() : DefaultSweep();
  braidUniqueId id = NewId();
  auto results =
      RunThreads(size, [&](int rank, int n) { return SweepRank(kind, rank, n, id, sweep); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

void RunProcessSweep(Kind kind) {
  const int size = GENERATE(2, 3, 5);
  CAPTURE(size);
  braidUniqueId id = NewId();
  auto results = RunProcesses(
      size, [&](int rank, int n) { return SweepRank(kind, rank, n, id, DefaultSweep()); }, 300000);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

}  // namespace

TEST_CASE("ring allgather matches the reference, ranks as threads", "[allgather][threads]") {
  RunThreadSweep(Kind::kAllGather);
}
TEST_CASE("ring reducescatter matches the reference, ranks as threads",
          "[reducescatter][threads]") {
  RunThreadSweep(Kind::kReduceScatter);
}
TEST_CASE("chain broadcast matches the reference, ranks as threads", "[broadcast][threads]") {
  RunThreadSweep(Kind::kBroadcast);
}
TEST_CASE("chain reduce matches the reference, ranks as threads", "[reduce][threads]") {
  RunThreadSweep(Kind::kReduce);
}

TEST_CASE("ring allgather matches the reference, ranks as processes", "[allgather][processes]") {
  RunProcessSweep(Kind::kAllGather);
}
TEST_CASE("ring reducescatter matches the reference, ranks as processes",
          "[reducescatter][processes]") {
  RunProcessSweep(Kind::kReduceScatter);
}
TEST_CASE("chain broadcast matches the reference, ranks as processes", "[broadcast][processes]") {
  RunProcessSweep(Kind::kBroadcast);
}
TEST_CASE("chain reduce matches the reference, ranks as processes", "[reduce][processes]") {
  RunProcessSweep(Kind::kReduce);
}

// A rank that never joins: the waiting root times out within the deadline, and the error names the
// collective, its sequence number, the algorithm and the peer it was waiting for.
TEST_CASE("chain reduce timeout names collective, sequence and peer", "[reduce][errors]") {
  braidUniqueId id = NewId();
  std::atomic<bool> done{false};
  auto results = RunThreads(2, [&](int rank, int size) -> std::string {
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.timeoutMs = 1000;
    braidComm_t comm = nullptr;
    if (braidCommInitRankConfig(&comm, size, id, rank, &config) != braidSuccess) {
      done = true;
      return std::string("init failed: ") + braidGetLastError(nullptr);
    }
    std::string failure;
    if (rank == 0) {
      std::vector<float> send(4096, 1.0f), recv(4096);
      braidResult_t rc = braidReduce(send.data(), recv.data(), send.size(), braidFloat32, braidSum,
                                     0, comm, nullptr);
      const std::string error = braidGetLastError(comm);
      done = true;
      if (rc == braidSuccess) failure = "reduce succeeded without rank 1";
      for (const char* part : {"reduce #0", "ring", "from rank 1"}) {
        if (failure.empty() && error.find(part) == std::string::npos) {
          failure = std::string("error does not mention \"") + part + "\": " + error;
        }
      }
    } else {
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    braidCommDestroy(comm);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// The ring family is registered under "ring" for all four collectives, BRAID_ALGO can force it,
// and its cost functions behave: zero on one rank, growing with bytes and with latency.
TEST_CASE("ring family is registered and priced", "[registry]") {
  using algorithms::Collective;
  const Collective kinds[] = {Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kReduce};
  auto policy = algorithms::AlgorithmPolicy::Parse("ring");
  REQUIRE(policy.ok());
  for (Collective kind : kinds) {
    CAPTURE(algorithms::CollectiveName(kind));
    const algorithms::Algorithm* ring = algorithms::FindAlgorithm(kind, "ring");
    REQUIRE(ring != nullptr);
    algorithms::LinkModel link;
    CHECK(ring->cost(link, 1, 1 << 20) == 0);
    for (int n : {2, 3, 8}) {
      const double small = ring->cost(link, n, 1024), large = ring->cost(link, n, 64 << 20);
      CHECK(std::isfinite(large));
      CHECK(small > 0);
      CHECK(large > small);
    }
    algorithms::CollectiveArgs args;
    args.kind = kind;
    args.count = 1 << 20;
    auto chosen = algorithms::SelectAlgorithm(args, 4, policy.value(), link);
    REQUIRE(chosen.ok());
    CHECK(chosen.value() == ring);
  }
}

}  // namespace braid::testing
