// The tree family (allreduce "tree", "rd", "rhd"; broadcast and reduce "binomial") against the
// serial reference.
//
// BRAID_ALGO is read once per process, so tests/collectives/BUILD builds this file once per forced
// algorithm, with env = {"BRAID_ALGO": "<collective>:<name>"} and a Catch2 tag filter picking the
// collective's sweep. Each sweep runs world sizes 1-8 as threads (and some as processes), counts 0,
// 1, small primes, a tiny-chunk pipelined count and a large one, every dtype x op x in/out of place
// and, for rooted collectives, every root, over the default transport (shared memory) and over
// TCP. Rank results are strings (Catch2 stays on the main thread).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "algorithms/tree_allreduce.h"
#include "bindings/c/braid.h"
#include "tests/collectives/reference.h"
#include "tests/harness/multi_rank.h"

namespace braid::testing {
namespace {

constexpr int kTinyChunk = 256;                   // many pipelined chunks on mid-size counts
constexpr size_t kMidCount = 4099;                // prime; with kTinyChunk: dozens of chunks
constexpr size_t kLargeCount = (size_t{1} << 18) + 3;
const size_t kSmallCounts[] = {0, 1, 2, 7, 1021};

struct Sweep {
  int chunk_bytes = 512 * 1024;
  const char* transports = nullptr;  // nullptr: the default (shared memory between local ranks)
  std::vector<size_t> counts;
  // Large counts run a rotating subset of (type, op) pairs, so every dtype, op and root is still
  // covered without the full product.
  bool full_product_for_large = false;
};

Sweep SmallSweep() {
  Sweep s;
  s.counts.assign(std::begin(kSmallCounts), std::end(kSmallCounts));
  return s;
}
Sweep PipelinedSweep() {
  Sweep s;
  s.chunk_bytes = kTinyChunk;
  s.counts = {kMidCount};
  return s;
}
Sweep LargeSweep() {
  Sweep s;
  s.counts = {kLargeCount};
  return s;
}

std::string Describe(const char* what, braidDataType_t type, braidRedOp_t op, size_t count,
                     bool in_place, int root) {
  std::string s = std::string(what) + " " + TypeName(type) + " " + OpName(op) + " count " +
                  std::to_string(count) + (in_place ? " in place" : " out of place");
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

// Whether (type, op, count) runs: all of them for small counts, a rotating eighth for large ones.
bool Selected(const Sweep& sweep, size_t count, int t, int o) {
  return count < 100000 || sweep.full_product_for_large || (t * braidNumOps + o) % 8 == 0 ||
         (t == braidFloat32 && o == braidSum);
}

braidComm_t Init(int rank, int size, const braidUniqueId& id, const Sweep& sweep,
                 std::string* failure) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.chunkBytes = sweep.chunk_bytes;
  if (sweep.transports != nullptr) config.transports = sweep.transports;
  config.timeoutMs = 120000;
  braidComm_t comm = nullptr;
  if (braidCommInitRankConfig(&comm, size, id, rank, &config) != braidSuccess) {
    *failure = std::string("init failed: ") + braidGetLastError(nullptr);
    return nullptr;
  }
  return comm;
}

std::string CallFailed(const std::string& what, braidResult_t rc, braidComm_t comm) {
  return what + ": " + braidGetErrorString(rc) + ": " + braidGetLastError(comm);
}

// ---- allreduce ----------------------------------------------------------------------------------

std::string AllReduceSweep(int rank, int size, const braidUniqueId& id, const Sweep& sweep) {
  std::string failure;
  braidComm_t comm = Init(rank, size, id, sweep, &failure);
  if (comm == nullptr) return failure;
  for (size_t count : sweep.counts) {
    for (int t = 0; t < braidNumTypes && failure.empty(); ++t) {
      for (int o = 0; o < braidNumOps && failure.empty(); ++o) {
        if (!Selected(sweep, count, t, o)) continue;
        for (bool in_place : {false, true}) {
          auto type = static_cast<braidDataType_t>(t);
          auto op = static_cast<braidRedOp_t>(o);
          const std::string what = Describe("allreduce", type, op, count, in_place, -1);
          std::vector<char> send = MakeInput(type, op, rank, count);
          std::vector<char> recv(send.size(), 0x5A);
          void* out = in_place ? send.data() : recv.data();
          braidResult_t rc = braidAllReduce(send.data(), out, count, type, op, comm, nullptr);
          if (rc != braidSuccess) {
            failure = CallFailed(what, rc, comm);
            break;
          }
          std::string wrong = CheckReduced(type, op, size, out, count);
          if (wrong.empty() && !in_place) {
            if (send != MakeInput(type, op, rank, count)) wrong = "sendbuff was modified";
            if (static_cast<unsigned char>(recv.back()) != 0x5A) wrong = "wrote past recvbuff";
          }
          if (!wrong.empty()) {
            failure = what + ": " + wrong;
            break;
          }
        }
      }
    }
  }
  braidCommDestroy(comm);
  return failure;
}

// Inexact inputs (random floats, whose sums depend on the reduction order): every rank must end
// with the same bits. Each rank stores its result in results[rank].
std::string AllReduceIdenticalBits(int rank, int size, const braidUniqueId& id,
                                   std::vector<std::vector<char>>* results) {
  std::string failure;
  Sweep sweep;
  sweep.chunk_bytes = 4096;
  braidComm_t comm = Init(rank, size, id, sweep, &failure);
  if (comm == nullptr) return failure;
  const size_t count = 3001;
  std::mt19937 random(1234 + rank);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (braidDataType_t type : {braidFloat16, braidBfloat16, braidFloat32, braidFloat64}) {
    for (braidRedOp_t op : {braidSum, braidAvg}) {
      std::vector<char> buffer(count * TypeSize(type));
      for (size_t i = 0; i < count; ++i) Store(type, buffer.data(), i, value(random) * 1000.0f);
      braidResult_t rc = braidAllReduce(buffer.data(), buffer.data(), count, type, op, comm, nullptr);
      if (rc != braidSuccess) {
        failure = CallFailed(Describe("allreduce", type, op, count, true, -1), rc, comm);
        break;
      }
      (*results)[rank].insert((*results)[rank].end(), buffer.begin(), buffer.end());
    }
  }
  braidCommDestroy(comm);
  return failure;
}

// ---- broadcast ----------------------------------------------------------------------------------

std::string BroadcastSweep(int rank, int size, const braidUniqueId& id, const Sweep& sweep) {
  std::string failure;
  braidComm_t comm = Init(rank, size, id, sweep, &failure);
  if (comm == nullptr) return failure;
  for (size_t count : sweep.counts) {
    for (int t = 0; t < braidNumTypes && failure.empty(); ++t) {
      for (int root = 0; root < size && failure.empty(); ++root) {
        if (count >= 100000 && (t + root) % 3 != 0 && !(root == 0 && t == braidFloat32)) continue;
        for (bool in_place : {false, true}) {
          auto type = static_cast<braidDataType_t>(t);
          const std::string what = Describe("broadcast", type, braidSum, count, in_place, root);
          // The root's data depends on the root, so a wrong source is caught.
          const std::vector<char> expected = MakeInput(type, braidSum, root, count);
          std::vector<char> send =
              rank == root ? expected : std::vector<char>(expected.size(), 0x33);
          std::vector<char> recv(expected.size(), 0x5A);
          void* out = in_place ? send.data() : recv.data();
          // Out of place, non-roots pass no sendbuff at all (NCCL allows it).
          const void* in = in_place || rank == root ? send.data() : nullptr;
          braidResult_t rc = braidBroadcast(in, out, count, type, root, comm, nullptr);
          if (rc != braidSuccess) {
            failure = CallFailed(what, rc, comm);
            break;
          }
          std::string wrong;
          if (count > 0 && std::memcmp(out, expected.data(), count * TypeSize(type)) != 0) {
            wrong = "recvbuff differs from the root's data";
          }
          if (!in_place) {
            if (rank == root && send != expected) wrong = "the root's sendbuff was modified";
            if (static_cast<unsigned char>(recv.back()) != 0x5A) wrong = "wrote past recvbuff";
          }
          if (!wrong.empty()) {
            failure = what + ": " + wrong;
            break;
          }
        }
      }
    }
  }
  braidCommDestroy(comm);
  return failure;
}

// ---- reduce -------------------------------------------------------------------------------------

std::string ReduceSweep(int rank, int size, const braidUniqueId& id, const Sweep& sweep) {
  std::string failure;
  braidComm_t comm = Init(rank, size, id, sweep, &failure);
  if (comm == nullptr) return failure;
  for (size_t count : sweep.counts) {
    for (int t = 0; t < braidNumTypes && failure.empty(); ++t) {
      for (int o = 0; o < braidNumOps && failure.empty(); ++o) {
        for (int root = 0; root < size && failure.empty(); ++root) {
          if (!Selected(sweep, count, t, (o + root) % braidNumOps)) continue;
          for (bool in_place : {false, true}) {
            auto type = static_cast<braidDataType_t>(t);
            auto op = static_cast<braidRedOp_t>(o);
            const std::string what = Describe("reduce", type, op, count, in_place, root);
            const std::vector<char> input = MakeInput(type, op, rank, count);
            std::vector<char> send = input;
            std::vector<char> recv(send.size(), 0x5A);
            const std::vector<char> untouched = recv;
            // Out of place, every other non-root passes no recvbuff (NCCL allows it).
            void* out = in_place ? send.data()
                        : (rank != root && (root + count) % 2 == 1) ? nullptr
                                                                     : recv.data();
            braidResult_t rc = braidReduce(send.data(), out, count, type, op, root, comm, nullptr);
            if (rc != braidSuccess) {
              failure = CallFailed(what, rc, comm);
              break;
            }
            std::string wrong;
            if (rank == root) {
              wrong = CheckReduced(type, op, size, in_place ? send.data() : recv.data(), count);
            } else if (send != input) {
              wrong = "a non-root's buffer was modified";
            }
            if (!in_place) {
              if (rank == root && send != input) wrong = "sendbuff was modified";
              if (rank != root && recv != untouched) wrong = "a non-root's recvbuff was written";
              if (static_cast<unsigned char>(recv.back()) != 0x5A) wrong = "wrote past recvbuff";
            }
            if (!wrong.empty()) {
              failure = what + ": " + wrong;
              break;
            }
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

using SweepFn = std::string (*)(int, int, const braidUniqueId&, const Sweep&);

void RunSweepThreads(SweepFn fn, int size, const Sweep& sweep) {
  braidUniqueId id = NewId();
  auto results = RunThreads(size, [&](int rank, int n) { return fn(rank, n, id, sweep); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

void RunSweepProcesses(SweepFn fn, int size, const Sweep& sweep) {
  braidUniqueId id = NewId();
  auto results =
      RunProcesses(size, [&](int rank, int n) { return fn(rank, n, id, sweep); }, 300000);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

void RunAll(SweepFn fn) {
  SECTION("threads, small counts") {
    const int size = GENERATE(1, 2, 3, 4, 5, 8);
    CAPTURE(size);
    RunSweepThreads(fn, size, SmallSweep());
  }
  SECTION("threads, tiny chunks") {
    const int size = GENERATE(2, 3, 5, 8);
    CAPTURE(size);
    RunSweepThreads(fn, size, PipelinedSweep());
  }
  SECTION("threads, large count") {
    const int size = GENERATE(1, 2, 3, 4, 5, 8);
    CAPTURE(size);
    RunSweepThreads(fn, size, LargeSweep());
  }
  SECTION("threads over TCP, small and tiny-chunk counts") {
    const int size = GENERATE(2, 3, 5);
    CAPTURE(size);
    Sweep sweep = SmallSweep();
    sweep.transports = "tcp";
    RunSweepThreads(fn, size, sweep);
    sweep = PipelinedSweep();
    sweep.transports = "tcp";
    RunSweepThreads(fn, size, sweep);
  }
  SECTION("processes") {
    const int size = GENERATE(3, 4, 6);
    CAPTURE(size);
    Sweep sweep = SmallSweep();
    sweep.counts.push_back(kLargeCount);
    RunSweepProcesses(fn, size, sweep);
  }
}

// "allreduce:tree" → {allreduce, "tree"}; empty name if BRAID_ALGO is unset.
std::pair<algorithms::Collective, std::string> ForcedAlgorithm() {
  const char* env = std::getenv("BRAID_ALGO");
  std::string spec = env == nullptr ? "" : env;
  algorithms::Collective kind = algorithms::Collective::kAllReduce;
  size_t colon = spec.find(':');
  if (colon == std::string::npos) return {kind, ""};
  REQUIRE(algorithms::ParseCollective(spec.substr(0, colon).c_str(), &kind));
  return {kind, spec.substr(colon + 1)};
}

}  // namespace

TEST_CASE("double binary tree: parents and children agree, both trees span all ranks",
          "[topology]") {
  for (int n = 1; n <= 67; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      CAPTURE(n, tree);
      std::vector<int> parent_count(n, 0);
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        algorithms::TreeLinks links = algorithms::DoubleBinaryTree(n, r, tree);
        if (links.parent < 0) ++roots;
        for (int child : links.children) {
          if (child < 0) continue;
          REQUIRE(child < n);
          REQUIRE(child != r);
          REQUIRE(algorithms::DoubleBinaryTree(n, child, tree).parent == r);
          ++parent_count[child];
        }
        if (links.parent >= 0) {
          algorithms::TreeLinks up = algorithms::DoubleBinaryTree(n, links.parent, tree);
          REQUIRE((up.children[0] == r || up.children[1] == r));
        }
      }
      CHECK(roots == 1);
      // Every rank but the root has exactly one parent, and following parents reaches the root.
      for (int r = 0; r < n; ++r) {
        int hops = 0;
        for (int x = r; algorithms::DoubleBinaryTree(n, x, tree).parent >= 0; ++hops) {
          x = algorithms::DoubleBinaryTree(n, x, tree).parent;
          REQUIRE(hops < n);
        }
        CHECK(parent_count[r] == (algorithms::DoubleBinaryTree(n, r, tree).parent >= 0 ? 1 : 0));
      }
    }
    // Complementary: with more than two ranks, no rank has two children in both trees.
    if (n > 3) {
      for (int r = 0; r < n; ++r) {
        auto t0 = algorithms::DoubleBinaryTree(n, r, 0), t1 = algorithms::DoubleBinaryTree(n, r, 1);
        CHECK_FALSE((t0.children[1] >= 0 && t1.children[1] >= 0));
      }
    }
  }
}

TEST_CASE("BRAID_ALGO forces the algorithm under test at every size", "[forced]") {
  auto [kind, name] = ForcedAlgorithm();
  if (name.empty()) return;
  auto policy = algorithms::AlgorithmPolicy::Parse(std::getenv("BRAID_ALGO"));
  REQUIRE(policy.ok());
  REQUIRE(algorithms::FindAlgorithm(kind, name.c_str()) != nullptr);
  for (int n : {2, 3, 8, 64}) {
    for (size_t count : {size_t{1}, size_t{1} << 10, size_t{1} << 28}) {
      algorithms::CollectiveArgs args;
      args.kind = kind;
      args.count = count;
      auto chosen = algorithms::SelectAlgorithm(args, n, policy.value(), algorithms::LinkModel());
      REQUIRE(chosen.ok());
      CHECK(std::string(chosen.value()->name) == name);
    }
  }
}

TEST_CASE("allreduce matches the serial reference", "[allreduce]") { RunAll(AllReduceSweep); }

TEST_CASE("allreduce results are bitwise identical on every rank", "[allreduce]") {
  const int size = GENERATE(2, 3, 4, 5, 8);
  CAPTURE(size);
  braidUniqueId id = NewId();
  std::vector<std::vector<char>> bits(size);
  auto results = RunThreads(size, [&](int rank, int n) {
    return AllReduceIdenticalBits(rank, n, id, &bits);
  });
  INFO(Failures(results));
  REQUIRE(Failures(results).empty());
  for (int rank = 1; rank < size; ++rank) {
    CAPTURE(rank);
    CHECK(bits[rank] == bits[0]);
  }
}

TEST_CASE("broadcast matches the root's data from every root", "[broadcast]") {
  RunAll(BroadcastSweep);
}

TEST_CASE("reduce matches the serial reference at every root", "[reduce]") { RunAll(ReduceSweep); }

}  // namespace braid::testing
