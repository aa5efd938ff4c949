// The two-level algorithms (algorithms/hierarchical.h) on one machine, with a made-up host split:
// rank threads linked over real shared memory (or TCP), each rank's CollectiveContext carrying a
// HostTopology built from host keys the test chooses, so the intra-host and cross-host phases run
// as they do across real hosts (tests/multihost runs them across network namespaces).
//
// Shapes: hosts in rank order (2 x 4), interleaved (3 x 2 as x y z x y z), uneven (1, 2 and 2
// ranks: allreduce, all-gather and reduce-scatter decline to the flat ring there, broadcast and
// reduce stay two-level), one host and one rank per host (both decline). Every collective, counts
// that leave shards empty or uneven, sum / avg / max, in and out of place, every root; each result
// is checked against a closed form computed here, not against another algorithm. Small chunks
// (64 B) push every phase through many pipelined slices.
//
// Then the selector: with more than one host and more than one rank per host the cost model
// picks "hier" for large buffers of every collective; with one host, one rank per host, or (for
// allreduce, all-gather, reduce-scatter) unequal hosts it never does. And errors name the
// communicator's ranks, not a subgroup's.
//
// Rank threads return strings; only the main thread calls Catch2 (Catch2 v2 is not thread-safe).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/collective_context.h"
#include "algorithms/hierarchical.h"
#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "algorithms/tag_layout.h"
#include "tests/harness/multi_rank.h"
#include "tests/harness/mesh_rank_context.h"
#include "tests/harness/transport_mesh.h"

namespace braid::algorithms {
namespace {

using braid::testing::Failures;
using braid::testing::RunThreads;

constexpr int64_t kTimeoutMs = 30000;

// One rank's context over the mesh, with the test's topology.
struct RankContext : braid::testing::MeshRankContext {
  RankContext(braid::testing::TransportMesh& mesh, int rank, const HostTopology& topology)
      : MeshRankContext(mesh, rank, kTimeoutMs) {
    ctx.topology = &topology;
  }
};

// Rank r's element i: distinct, exact in int32 sums over a few ranks.
int32_t Value(int r, size_t i) { return static_cast<int32_t>((r + 1) * 1000 + 7 * i) * (r % 2 ? -1 : 1); }

int64_t Reduced(ReduceOp op, int n, size_t i) {
  int64_t acc = Value(0, i);
  for (int r = 1; r < n; ++r) {
    acc = op == ReduceOp::kMax ? std::max<int64_t>(acc, Value(r, i)) : acc + Value(r, i);
  }
  if (op == ReduceOp::kAvg) acc = static_cast<int32_t>(acc) / n;  // truncates, once
  return acc;
}

const char* OpName(ReduceOp op) {
  return op == ReduceOp::kSum ? "sum" : op == ReduceOp::kAvg ? "avg" : "max";
}

// Runs `kind` by "hier" on this rank (count as braid.h means it) and checks the result.
std::string RunOne(const CollectiveContext& ctx, Collective kind, size_t count, ReduceOp op,
                   bool in_place, int root) {
  const int n = ctx.size, rank = ctx.rank;
  const std::string what = std::string(CollectiveName(kind)) + " count " + std::to_string(count) +
                           " " + OpName(op) + (in_place ? " in place" : "") + " root " +
                           std::to_string(root) + ": ";
  const bool per_rank = kind == Collective::kAllGather || kind == Collective::kReduceScatter;
  const size_t send_count = kind == Collective::kReduceScatter ? count * n : count;
  const size_t recv_count = kind == Collective::kAllGather ? count * n : count;
  std::vector<int32_t> send(send_count), buffer(std::max(send_count, recv_count), -1);
  for (size_t i = 0; i < send_count; ++i) {
    send[i] = kind == Collective::kAllGather || kind == Collective::kBroadcast
                  ? static_cast<int32_t>(rank * 100000 + i)
                  : Value(rank, i);
  }
  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.type = DataType::kInt32;
  args.op = op;
  args.root = root;
  int32_t* out = buffer.data();
  if (in_place) {
    if (kind == Collective::kAllGather) {
      std::copy(send.begin(), send.end(), buffer.begin() + rank * count);
      args.sendbuf = buffer.data() + rank * count;
    } else if (kind == Collective::kReduceScatter) {
      std::copy(send.begin(), send.end(), buffer.begin());
      args.sendbuf = buffer.data();
      out = buffer.data() + rank * count;
    } else {
      std::copy(send.begin(), send.end(), buffer.begin());
      args.sendbuf = buffer.data();
    }
  } else {
    args.sendbuf = send.data();
  }
  args.recvbuf = out;
  (void)per_rank;
  const Algorithm* hier = FindAlgorithm(kind, "hier");
  if (hier == nullptr) return what + "no hier algorithm registered";
  Status status = hier->run(ctx, args);
  if (!status.ok()) return what + status.ToString();
  auto mismatch = [&](size_t i, int64_t got, int64_t want) {
    return what + "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
           std::to_string(want);
  };
  switch (kind) {
    case Collective::kAllReduce:
      for (size_t i = 0; i < count; ++i) {
        if (out[i] != Reduced(op, n, i)) return mismatch(i, out[i], Reduced(op, n, i));
      }
      break;
    case Collective::kReduce:
      if (rank != root) break;
      for (size_t i = 0; i < count; ++i) {
        if (out[i] != Reduced(op, n, i)) return mismatch(i, out[i], Reduced(op, n, i));
      }
      break;
    case Collective::kReduceScatter:
      for (size_t i = 0; i < count; ++i) {
        const int64_t want = Reduced(op, n, rank * count + i);
        if (out[i] != want) return mismatch(i, out[i], want);
      }
      break;
    case Collective::kBroadcast:
      for (size_t i = 0; i < count; ++i) {
        const int64_t want = root * 100000 + static_cast<int64_t>(i);
        if (out[i] != want) return mismatch(i, out[i], want);
      }
      break;
    case Collective::kAllGather:
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          const int64_t want = r * 100000 + static_cast<int64_t>(i);
          if (out[r * count + i] != want) return mismatch(r * count + i, out[r * count + i], want);
        }
      }
      break;
    default:
      return what + "not a two-level collective";
  }
  if (!in_place) {
    for (size_t i = 0; i < send_count; ++i) {
      const int32_t want = kind == Collective::kAllGather || kind == Collective::kBroadcast
                               ? static_cast<int32_t>(rank * 100000 + i)
                               : Value(rank, i);
      if (send[i] != want) return what + "sendbuf changed at element " + std::to_string(i);
    }
  }
  return "";
}

// Every collective, count, op, placement and root on one topology; "" or the first failure.
std::string RunAll(braid::testing::TransportMesh& mesh, const HostTopology& topology, int rank) {
  RankContext rc(mesh, rank, topology);
  uint64_t sequence = 0;
  const int n = mesh.size();
  for (Collective kind : {Collective::kAllReduce, Collective::kReduceScatter,
                          Collective::kAllGather, Collective::kBroadcast, Collective::kReduce}) {
    const bool reduces = kind == Collective::kAllReduce || kind == Collective::kReduce ||
                         kind == Collective::kReduceScatter;
    const bool rooted = kind == Collective::kBroadcast || kind == Collective::kReduce;
    for (size_t count : {size_t{1}, size_t{7}, size_t{301}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        if (!reduces && op != ReduceOp::kSum) continue;
        for (bool in_place : {false, true}) {
          for (int root = 0; root < (rooted ? n : 1); ++root) {
            rc.ctx.sequence = OperationSequence(TagSpace::kCollective, sequence++);
            const std::string failure = RunOne(rc.ctx, kind, count, op, in_place, root);
            if (!failure.empty()) return failure;
          }
        }
      }
    }
  }
  return "";
}

}  // namespace

TEST_CASE("two-level collectives on made-up hosts", "[hier]") {
  struct Shape {
    const char* name;
    std::vector<std::string> keys;
  };
  const Shape shape = GENERATE(Shape{"2 hosts x 4, in rank order", {"a", "a", "a", "a", "b", "b", "b", "b"}},
                               Shape{"3 hosts x 2, interleaved", {"x", "y", "z", "x", "y", "z"}},
                               Shape{"uneven 1, 2, 2", {"a", "b", "b", "c", "c"}},
                               Shape{"one host", {"a", "a", "a"}},
                               Shape{"one rank per host", {"a", "b", "c"}});
  const std::string transport = GENERATE(as<std::string>(), "shm", "tcp");
  CAPTURE(shape.name, transport);
  const HostTopology topology = HostTopology::FromHostKeys(shape.keys);
  auto mesh = braid::testing::MakeTransportMesh(transport, topology.ranks(), kTimeoutMs);
  REQUIRE(mesh.error.empty());
  auto results = RunThreads(topology.ranks(), [&](int rank, int) { return RunAll(mesh, topology, rank); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// Buffers of several 2 MiB pieces take the pipelined path: each piece's cross-host phase on a
// helper thread while the calling thread works inside the host on its neighbours.
TEST_CASE("two-level allreduce of large buffers, pieces pipelined", "[hier][pipelined]") {
  struct Shape {
    const char* name;
    std::vector<std::string> keys;
  };
  const Shape shape = GENERATE(Shape{"2 hosts x 4, in rank order", {"a", "a", "a", "a", "b", "b", "b", "b"}},
                               Shape{"3 hosts x 2, interleaved", {"x", "y", "z", "x", "y", "z"}});
  const std::string transport = GENERATE(as<std::string>(), "shm", "tcp");
  CAPTURE(shape.name, transport);
  const HostTopology topology = HostTopology::FromHostKeys(shape.keys);
  auto mesh = braid::testing::MakeTransportMesh(transport, topology.ranks(), kTimeoutMs);
  REQUIRE(mesh.error.empty());
  // 3 pieces and a bit: pieces, shards and slices all uneven.
  const size_t count = (size_t{3} << 20) / 2 + 5;
  auto results = RunThreads(topology.ranks(), [&](int rank, int) -> std::string {
    RankContext rc(mesh, rank, topology);
    rc.ctx.chunk_bytes = 512 * 1024;
    uint64_t sequence = 0;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (bool in_place : {false, true}) {
        rc.ctx.sequence = OperationSequence(TagSpace::kCollective, sequence++);
        const std::string failure =
            RunOne(rc.ctx, Collective::kAllReduce, count, op, in_place, 0);
        if (!failure.empty()) return failure;
      }
    }
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("the cost model picks two levels across hosts only", "[hier][selector]") {
  const AlgorithmPolicy any;
  LinkModel link;  // the network: 1 GB/s, 10 us
  link.intra_host_bandwidth_gbps = 8.0;
  link.intra_host_latency_us = 1.0;
  auto pick = [&](Collective kind, int n, size_t bytes) -> std::string {
    CollectiveArgs args;
    args.kind = kind;
    const bool per_rank = kind == Collective::kAllGather || kind == Collective::kReduceScatter;
    args.count = bytes / 4 / (per_rank ? n : 1);
    auto chosen = SelectAlgorithm(args, n, any, link);
    return chosen.ok() ? chosen.value()->name : chosen.status().ToString();
  };
  const Collective kinds[] = {Collective::kAllReduce, Collective::kReduceScatter,
                              Collective::kAllGather, Collective::kBroadcast, Collective::kReduce};
  for (Collective kind : kinds) {
    CAPTURE(CollectiveName(kind));
    link.hosts = 2;
    link.ranks_per_host = 4;
    CHECK(pick(kind, 8, 64 << 20) == "hier");
    link.hosts = 4;
    link.ranks_per_host = 2;
    CHECK(pick(kind, 8, 64 << 20) == "hier");
    link.hosts = 1;
    link.ranks_per_host = 8;
    CHECK(pick(kind, 8, 64 << 20) != "hier");
    link.hosts = 8;
    link.ranks_per_host = 1;
    CHECK(pick(kind, 8, 64 << 20) != "hier");
  }
  // 3 hosts of 2, 2 and 1 ranks: allreduce, reduce-scatter and all-gather decline.
  link.hosts = 3;
  link.ranks_per_host = 2;
  for (Collective kind : {Collective::kAllReduce, Collective::kReduceScatter,
                          Collective::kAllGather}) {
    CAPTURE(CollectiveName(kind));
    CHECK(std::isinf(FindAlgorithm(kind, "hier")->cost(link, 5, 64 << 20)));
    CHECK(pick(kind, 5, 64 << 20) != "hier");
  }
  CHECK(pick(Collective::kBroadcast, 5, 64 << 20) == "hier");
  // Across hosts every two-level cost is finite, non-negative and grows with size.
  for (Collective kind : kinds) {
    for (auto [hosts, per_host] : {std::pair{2, 4}, std::pair{4, 2}, std::pair{3, 5}}) {
      link.hosts = hosts;
      link.ranks_per_host = per_host;
      double previous = -1;
      for (size_t bytes = 0; bytes <= (size_t{1} << 34); bytes = bytes == 0 ? 1 : bytes * 4) {
        CAPTURE(CollectiveName(kind), hosts, per_host, bytes);
        const double cost = FindAlgorithm(kind, "hier")->cost(link, hosts * per_host, bytes);
        CHECK(cost >= 0);
        CHECK(cost < 1e15);
        CHECK(cost >= previous);
        previous = cost;
      }
    }
  }
  // The INFO line's summary says the same.
  link.hosts = 2;
  link.ranks_per_host = 4;
  const std::string summary = TwoLevelChoices(any, 8, link);
  INFO(summary);
  CHECK(summary.find("allreduce from ") != std::string::npos);
  CHECK(summary.find("never") == std::string::npos);
}

TEST_CASE("a two-level collective's error names the communicator's ranks", "[hier][errors]") {
  // 2 hosts x 2 as a b a b: rank 3 never joins, so rank 1 (its host partner) and the ranks it
  // crosses hosts with wait for it; the errors must say rank 3, the communicator's number, where
  // the subgroup calls it 1.
  const HostTopology topology = HostTopology::FromHostKeys({"a", "b", "a", "b"});
  auto mesh = braid::testing::MakeTransportMesh("shm", 4, kTimeoutMs);
  REQUIRE(mesh.error.empty());
  auto results = RunThreads(4, [&](int rank, int) -> std::string {
    if (rank == 3) return "";
    RankContext rc(mesh, rank, topology);
    rc.ctx.deadline = Deadline::AfterMs(1500);
    std::vector<int32_t> data(64, 1);
    CollectiveArgs args;
    args.count = data.size();
    args.type = DataType::kInt32;
    args.sendbuf = data.data();
    args.recvbuf = data.data();
    const Status status = FindAlgorithm(Collective::kAllReduce, "hier")->run(rc.ctx, args);
    if (status.ok()) return rank == 1 ? "succeeded without rank 3" : "";
    const std::string text = status.ToString();
    if (text.find("rank " + std::to_string(rank) + ": allreduce") == std::string::npos) {
      return "error does not lead with this rank's number: " + text;
    }
    if (rank == 1 && text.find("rank 3") == std::string::npos) {
      return "error does not name rank 3: " + text;
    }
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

}  // namespace braid::algorithms
