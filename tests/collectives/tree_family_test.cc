// The tree family beyond the reference sweeps (tests/collectives/sweep_test.cc sweeps every
// algorithm of every collective): the double binary tree's topology, and allreduce results that
// are bitwise identical on every rank for inexact (order-dependent) float inputs, with every
// allreduce algorithm, each forced through braidConfig_t::algo.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/allreduce_tree.h"
#include "bindings/c/braid.h"
#include "tests/collectives/reference.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

// Every allreduce algorithm the registry has.
std::vector<std::string> AllReduceAlgorithms() {
  std::vector<std::string> names;
  for (const algorithms::Algorithm& a : algorithms::Algorithms()) {
    if (a.kind == algorithms::Collective::kAllReduce) names.push_back(a.name);
  }
  return names;
}

// Inexact inputs (random floats, whose sums depend on the reduction order): every rank must end
// with the same bits. Each rank stores its results in bits[rank].
std::string AllReduceIdenticalBits(braidComm_t comm, int rank, std::vector<std::vector<char>>* bits) {
  const size_t count = 3001;
  std::mt19937 random(1234 + rank);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (braidDataType_t type : {braidFloat16, braidBfloat16, braidFloat32, braidFloat64}) {
    for (braidRedOp_t op : {braidSum, braidAvg}) {
      std::vector<char> buffer(count * TypeSize(type));
      for (size_t i = 0; i < count; ++i) Store(type, buffer.data(), i, value(random) * 1000.0f);
      braidResult_t rc = braidAllReduce(buffer.data(), buffer.data(), count, type, op, comm, nullptr);
      if (rc != braidSuccess) {
        return std::string("allreduce ") + TypeName(type) + " " + OpName(op) + ": " +
               braidGetErrorString(rc) + ": " + braidGetLastError(comm);
      }
      (*bits)[rank].insert((*bits)[rank].end(), buffer.begin(), buffer.end());
    }
  }
  return "";
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

TEST_CASE("allreduce results are bitwise identical on every rank, every algorithm",
          "[allreduce]") {
  const std::vector<std::string> names = AllReduceAlgorithms();
  REQUIRE(!names.empty());
  const std::string algo = "allreduce:" + names[GENERATE_COPY(range(size_t{0}, names.size()))];
  const int size = GENERATE(2, 3, 4, 5, 8);
  CommJob job;
  job.size = size;
  job.config.algo = algo.c_str();
  job.config.chunkBytes = 4096;
  CAPTURE(Describe(job));
  std::vector<std::vector<char>> bits(size);
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) {
    return AllReduceIdenticalBits(comm, rank, &bits);
  });
  BRAID_CHECK_RANKS(results);
  REQUIRE(Failures(results).empty());
  REQUIRE(!bits[0].empty());
  for (int rank = 1; rank < size; ++rank) {
    CAPTURE(rank);
    CHECK(bits[rank] == bits[0]);
  }
}

}  // namespace braid::testing
