// The fan primitives (algorithms/fan_primitives.h) on their own, over real connections (shared
// memory and TCP, one transport per rank thread, every pair linked): fan-in with the operand
// order the moves promise, fan-out, accumulating partials sent up a chain, pairwise exchange,
// signals, FanRound's posted-at-once rounds, and failures that name the operation, the message
// and the peer. Every result is
// checked against a closed form computed here, not against another algorithm.
//
// Rank threads return strings; only the main thread calls Catch2 (Catch2 v2 is not thread-safe).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/collective_context.h"
#include "algorithms/fan_primitives.h"
#include "algorithms/tag_layout.h"
#include "tests/harness/multi_rank.h"
#include "tests/harness/mesh_rank_context.h"
#include "tests/harness/transport_mesh.h"

namespace braid::algorithms {
namespace {

using braid::testing::Failures;
using braid::testing::RunThreads;

constexpr int64_t kTimeoutMs = 20000;

// `size` ranks linked pairwise over the registry's transport `name` (tests/harness).
using Mesh = braid::testing::TransportMesh;
Mesh MakeMesh(const std::string& name, int size) {
  return braid::testing::MakeTransportMesh(name, size, kTimeoutMs);
}

// One rank's CollectiveContext over the mesh, in collective `sequence`.
struct RankContext : braid::testing::MeshRankContext {
  RankContext(Mesh& mesh, int rank, uint64_t sequence, int64_t timeout_ms)
      : MeshRankContext(mesh, rank, timeout_ms) {
    ctx.sequence = OperationSequence(TagSpace::kCollective, sequence);
  }
};

CollectiveArgs Args(Collective kind, size_t count, DataType type, ReduceOp op) {
  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.type = type;
  args.op = op;
  return args;
}

// Rank r's contribution, element i: distinct per rank and element, exact in int32 sums.
int32_t Value(int r, size_t i) { return static_cast<int32_t>(1000 * (r + 1) + 7 * i) * (r % 2 ? -1 : 1); }

std::string Mismatch(const char* what, size_t i, int64_t got, int64_t want) {
  return std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got) +
         ", expected " + std::to_string(want);
}

const char* const kTransports[] = {"shm", "tcp"};

}  // namespace

TEST_CASE("fan primitives: fan-in to a root, fan-out back (star)", "[fan]") {
  const std::string name = GENERATE(as<std::string>(), "shm", "tcp");
  const int size = GENERATE(2, 4, 5);
  const ReduceOp op = GENERATE(ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg);
  CAPTURE(name, size, static_cast<int>(op));
  Mesh mesh = MakeMesh(name, size);
  REQUIRE(mesh.error.empty());
  const size_t count = 1000;  // 63 slices of 16 elements: far beyond the window of 4
  auto results = RunThreads(
      size,
      [&](int rank, int n) -> std::string {
        RankContext rc(mesh, rank, 11, kTimeoutMs);
        std::vector<int32_t> own(count), out(count, -1);
        for (size_t i = 0; i < count; ++i) own[i] = Value(rank, i);
        std::vector<int> leaves;
        for (int p = 1; p < n; ++p) leaves.push_back(p);
        const CollectiveArgs args = Args(Collective::kAllReduce, count, DataType::kInt32, op);
        FanPrimitives prims(rc.ctx, args, "star");
        for (size_t s = 0; s < prims.SliceCount(count); ++s) {
          const Span span = prims.Slice(count, s);
          if (rank == 0) {
            prims.RecvReduce(leaves, out.data(), own.data(), span);
            prims.Send(leaves, out.data(), span);
          } else {
            prims.Send(0, own.data(), span);
            prims.Recv(0, out.data(), span);
          }
        }
        Status status = prims.Finish();
        if (!status.ok()) return status.ToString();
        for (size_t i = 0; i < count; ++i) {
          int64_t want = Value(0, i);
          for (int p = 1; p < n; ++p) {
            want = op == ReduceOp::kMax ? std::max<int64_t>(want, Value(p, i)) : want + Value(p, i);
          }
          if (op == ReduceOp::kAvg) want = static_cast<int32_t>(want) / n;  // truncates, once
          if (out[i] != want) return Mismatch("star", i, out[i], want);
        }
        return "";
      },
      3 * kTimeoutMs, [&](const std::vector<int>&) { mesh.AbortAll("star hung"); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// Float sums are not associative: (1e8 + -1e8) + 1 is 1, 1e8 + (-1e8 + 1) is 0. A fan-in must
// combine in exactly the order `from` gives, own at this rank's place when listed, so it is
// checked with values where any other order gives another answer; in place too, where own is
// overwritten by the first combination before it is read (own at place 2 and later).
TEST_CASE("fan primitives: fan-in keeps the listed operand order, in place too", "[fan]") {
  const std::string name = GENERATE(as<std::string>(), "shm", "tcp");
  const bool in_place = GENERATE(false, true);
  // Small messages travel inside the shm ring; large ones by reference from the sender's buffer,
  // which stays in use until the receiver copied it (the in-place hazard).
  const size_t count = GENERATE(size_t{40}, size_t{30000});
  CAPTURE(name, in_place, count);
  const int size = 4;
  Mesh mesh = MakeMesh(name, size);
  REQUIRE(mesh.error.empty());
  const float kValues[size] = {1e8f, -1e8f, 1.0f, 0.25f};
  auto results = RunThreads(
      size,
      [&](int rank, int n) -> std::string {
        RankContext rc(mesh, rank, 12, kTimeoutMs);
        std::vector<float> own(count, kValues[rank]), out(count, -7.0f);
        float* dst = in_place ? own.data() : out.data();
        // Every rank gathers everyone in rank order (its own at its place), as the direct
        // allreduce does.
        std::vector<int> peers, order;
        for (int p = 0; p < n; ++p) {
          order.push_back(p);
          if (p != rank) peers.push_back(p);
        }
        const CollectiveArgs args = Args(Collective::kAllReduce, count, DataType::kFloat32,
                                         ReduceOp::kSum);
        FanPrimitives::Options options;
        options.window = static_cast<size_t>(n - 1);
        options.slot_elems = count;
        options.own_slot = true;
        FanPrimitives prims(rc.ctx, args, "ordered", options);
        prims.Send(peers, own.data(), Span{0, count});
        prims.RecvReduce(order, dst, own.data(), Span{0, count});
        Status status = prims.Finish();
        if (!status.ok()) return status.ToString();
        const float want = ((kValues[0] + kValues[1]) + kValues[2]) + kValues[3];
        for (size_t i = 0; i < count; ++i) {
          if (dst[i] != want) {
            return "element " + std::to_string(i) + " is " + std::to_string(dst[i]) +
                   ", expected " + std::to_string(want);
          }
        }
        return "";
      },
      3 * kTimeoutMs, [&](const std::vector<int>&) { mesh.AbortAll("ordered hung"); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// A chain n-1 -> ... -> 1 -> 0 of partials accumulated in the primitives' own slots (more
// slices than slots, so each is reused once its send completed), then a fan-out down a binary
// tree and a pairwise exchange around a ring, and a signal round: every move kind in one run.
TEST_CASE("fan primitives: accumulating chain, tree fan-out, pairwise exchange, signals", "[fan]") {
  const std::string name = GENERATE(as<std::string>(), "shm", "tcp");
  const int size = GENERATE(3, 6);
  CAPTURE(name, size);
  Mesh mesh = MakeMesh(name, size);
  REQUIRE(mesh.error.empty());
  const size_t count = 333;
  auto results = RunThreads(
      size,
      [&](int rank, int n) -> std::string {
        RankContext rc(mesh, rank, 13, kTimeoutMs);
        std::vector<int32_t> own(count), total(count, -1), ring(count, -1);
        for (size_t i = 0; i < count; ++i) own[i] = Value(rank, i);
        const CollectiveArgs args =
            Args(Collective::kReduce, count, DataType::kInt32, ReduceOp::kSum);
        FanPrimitives::Options options;
        options.acc_slots = 2;
        FanPrimitives prims(rc.ctx, args, "chain", options);
        const int up = rank - 1, below = rank + 1 < n ? rank + 1 : -1;
        std::vector<int> children;
        for (int c : {2 * rank + 1, 2 * rank + 2}) {
          if (c < n) children.push_back(c);
        }
        for (size_t s = 0; s < prims.SliceCount(count); ++s) {
          const Span span = prims.Slice(count, s);
          if (below < 0) {
            prims.Send(up, own.data(), span);
          } else if (rank > 0) {
            prims.RecvReduceSend(below, nullptr, own.data(), up, span);
          } else {
            prims.RecvReduce(below, total.data(), own.data(), span);
          }
        }
        // Down a binary tree: rank 0 fans out, inner ranks forward what lands.
        for (size_t s = 0; s < prims.SliceCount(count); ++s) {
          const Span span = prims.Slice(count, s);
          if (rank == 0) {
            prims.Send(children, total.data(), span);
          } else {
            prims.RecvCopySend((rank - 1) / 2, total.data(), children, span);
          }
        }
        // Around a ring: send own to rank+1, receive rank-1's.
        prims.Send((rank + 1) % n, own.data(), Span{0, count});
        prims.Recv((rank + n - 1) % n, ring.data(), Span{0, count});
        for (int d = 1; d < n; d <<= 1) {
          prims.Signal((rank + d) % n);
          prims.Await((rank - d + n) % n);
        }
        Status status = prims.Finish();
        if (!status.ok()) return status.ToString();
        for (size_t i = 0; i < count; ++i) {
          int64_t want = 0;
          for (int p = 0; p < n; ++p) want += Value(p, i);
          if (total[i] != want) return Mismatch("chain total", i, total[i], want);
          if (ring[i] != Value((rank + n - 1) % n, i)) {
            return Mismatch("ring", i, ring[i], Value((rank + n - 1) % n, i));
          }
        }
        return "";
      },
      3 * kTimeoutMs, [&](const std::vector<int>&) { mesh.AbortAll("chain hung"); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// Rank 1 sends nothing: rank 0's fan-in fails at its deadline, and the error says which
// operation, which message on which link, and which peer.
TEST_CASE("fan primitives: a failed fan-in names the operation, the message and the peer",
          "[fan]") {
  for (const char* name : kTransports) {
    CAPTURE(name);
    Mesh mesh = MakeMesh(name, 3);
    REQUIRE(mesh.error.empty());
    std::string error;
    auto results = RunThreads(
        3,
        [&](int rank, int) -> std::string {
          RankContext rc(mesh, rank, 14, rank == 0 ? 300 : kTimeoutMs);
          std::vector<int32_t> own(48, rank), out(48);
          const CollectiveArgs args =
              Args(Collective::kReduce, 48, DataType::kInt32, ReduceOp::kSum);
          FanPrimitives prims(rc.ctx, args, "fan-test");
          const int leaves[] = {2, 1};
          for (size_t s = 0; s < prims.SliceCount(48); ++s) {
            const Span span = prims.Slice(48, s);
            if (rank == 0) prims.RecvReduce(PeerSet(leaves, 2), out.data(), own.data(), span);
            if (rank == 2) prims.Send(0, own.data(), span);
          }
          Status status = prims.Finish();
          if (rank != 0) return status.ok() ? "" : status.ToString();
          if (status.ok()) return "rank 0's fan-in succeeded without rank 1's messages";
          error = status.ToString();
          return "";
        },
        3 * kTimeoutMs, [&](const std::vector<int>&) { mesh.AbortAll("failure test hung"); });
    INFO(Failures(results));
    CHECK(Failures(results).empty());
    CHECK_THAT(error, Catch::Contains("rank 0: reduce #14 (48 x int32, sum, root 0, fan-test): "
                                      "receiving message 0 from rank 1"));
    mesh.AbortAll("test over");  // rank 0's receive from rank 1 is still posted
  }
}

// FanRound: every rank posts a Send to and a Recv from every other rank at once (the direct
// algorithms' round), waits, and checks each block; a sliding window of two pairwise rounds
// (WaitOldest) around the ring; then rank 2 stays silent and rank 0's round names the message
// and the peer it was waiting for.
TEST_CASE("fan round: all-to-all at once, a sliding window, a failure naming the peer", "[fan]") {
  const std::string name = GENERATE(as<std::string>(), "shm", "tcp");
  CAPTURE(name);
  const int size = 4;
  Mesh mesh = MakeMesh(name, size);
  REQUIRE(mesh.error.empty());
  const size_t count = 5000;  // large enough for shm to hand some messages over by reference
  std::string error;
  auto results = RunThreads(
      size,
      [&](int rank, int n) -> std::string {
        {
          RankContext rc(mesh, rank, 21, kTimeoutMs);
          const CollectiveArgs args =
              Args(Collective::kAllToAll, count, DataType::kInt32, ReduceOp::kSum);
          std::vector<int32_t> own(count), got(static_cast<size_t>(n) * count, -1),
              ring(static_cast<size_t>(n) * count, -1);
          for (size_t i = 0; i < count; ++i) own[i] = Value(rank, i);
          FanRound round(rc.ctx, args, "round-test");
          for (int k = 1; k < n; ++k) {
            const int peer = (rank + k) % n;
            round.Send(peer, 7, own.data(), Span{0, count});
            round.Recv(peer, 7, got.data(), Span{static_cast<size_t>(peer) * count, count});
          }
          Status status = round.Wait();
          if (!status.ok()) return status.ToString();
          // Rounds k = 1..n-1 around the ring with a window of 2: send to rank+k, receive from
          // rank-k, each round's message numbered 100 + k.
          for (int k = 1; k < n; ++k) {
            round.Recv((rank + n - k) % n, 100 + k, ring.data(),
                       Span{static_cast<size_t>(k) * count, count});
            round.Send((rank + k) % n, 100 + k, own.data(), Span{0, count});
            if (k >= 2 && !round.WaitOldest().ok()) break;
          }
          status = round.Wait();
          if (!status.ok()) return status.ToString();
          for (int p = 0; p < n; ++p) {
            if (p == rank) continue;
            for (size_t i = 0; i < count; ++i) {
              if (got[p * count + i] != Value(p, i)) {
                return Mismatch("all-to-all", p * count + i, got[p * count + i], Value(p, i));
              }
            }
          }
          for (int k = 1; k < n; ++k) {  // round k's block came from rank - k
            const int from = (rank + n - k) % n;
            for (size_t i = 0; i < count; ++i) {
              if (ring[k * count + i] != Value(from, i)) {
                return Mismatch("ring", k * count + i, ring[k * count + i], Value(from, i));
              }
            }
          }
        }
        // Rank 2 sends nothing: rank 0's round fails at its deadline naming message 3 of rank 2.
        RankContext rc(mesh, rank, 22, rank == 0 ? 300 : kTimeoutMs);
        const CollectiveArgs args =
            Args(Collective::kGather, 8, DataType::kInt32, ReduceOp::kSum);
        std::vector<int32_t> block(8, rank), all(8 * n);
        FanRound round(rc.ctx, args, "round-test");
        if (rank == 0) {
          for (int p = 1; p < n; ++p) round.Recv(p, 3, all.data(), Span{8 * static_cast<size_t>(p), 8});
        } else if (rank != 2) {
          round.Send(0, 3, block.data(), Span{0, 8});
        }
        Status status = round.Wait();
        if (rank != 0) return status.ok() ? "" : status.ToString();
        if (status.ok()) return "rank 0's round succeeded without rank 2's message";
        error = status.ToString();
        return "";
      },
      3 * kTimeoutMs, [&](const std::vector<int>&) { mesh.AbortAll("round test hung"); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
  CHECK_THAT(error, Catch::Contains("rank 0: gather #22 (8 x int32 per rank, root 0, round-test): "
                                    "receiving message 3 from rank 2"));
  mesh.AbortAll("test over");  // rank 0's receive from rank 2 is still posted
}

}  // namespace braid::algorithms
