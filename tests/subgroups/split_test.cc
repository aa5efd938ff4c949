// braidCommSplit with NCCL's semantics, and many communicators used at once.
//
// Each rank computes what its child communicator must look like (rank, size, members) from the
// colors and keys alone, and checks it with collectives whose results name the members: an
// allreduce of parent ranks (sum over the members) and an allgather of parent ranks (the members
// in child-rank order).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/multi_rank.h"

namespace {

using braid::testing::Failures;
using braid::testing::RunProcesses;
using braid::testing::RunThreads;

struct SplitRule {
  std::function<int(int rank, int size)> color;
  std::function<int(int rank, int size)> key;
};

std::string Error(const char* what, braidComm_t comm) {
  return std::string(what) + ": " + braidGetLastError(comm);
}

// Parent ranks of the child this rank lands in, in child-rank order (NCCL: by key, then rank).
std::vector<int> ExpectedMembers(const SplitRule& rule, int rank, int size) {
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int r = 0; r < size; ++r) {
    if (rule.color(r, size) == rule.color(rank, size)) members.push_back({rule.key(r, size), r});
  }
  std::stable_sort(members.begin(), members.end());
  std::vector<int> ranks;
  for (auto& m : members) ranks.push_back(m.second);
  return ranks;
}

// Checks `child` against the members it should have. `parent_rank` is this rank in the parent.
std::string CheckChild(braidComm_t child, const std::vector<int>& members, int parent_rank) {
  int rank = -1, size = -1;
  if (braidCommUserRank(child, &rank) != braidSuccess || braidCommCount(child, &size) != braidSuccess) {
    return Error("query", child);
  }
  if (size != static_cast<int>(members.size())) {
    return "child size " + std::to_string(size) + ", expected " + std::to_string(members.size());
  }
  int expected_rank = static_cast<int>(std::find(members.begin(), members.end(), parent_rank) - members.begin());
  if (rank != expected_rank) {
    return "child rank " + std::to_string(rank) + ", expected " + std::to_string(expected_rank);
  }
  int64_t sum = parent_rank;
  if (braidAllReduce(&sum, &sum, 1, braidInt64, braidSum, child, nullptr) != braidSuccess) {
    return Error("allreduce on child", child);
  }
  int64_t expected_sum = 0;
  for (int m : members) expected_sum += m;
  if (sum != expected_sum) return "child allreduce gave " + std::to_string(sum) + ", expected " + std::to_string(expected_sum);
  std::vector<int32_t> gathered(size, -1);
  int32_t mine = parent_rank;
  if (braidAllGather(&mine, gathered.data(), 1, braidInt32, child, nullptr) != braidSuccess) {
    return Error("allgather on child", child);
  }
  for (int i = 0; i < size; ++i) {
    if (gathered[i] != members[i]) return "child allgather slot " + std::to_string(i) + " holds parent rank " + std::to_string(gathered[i]) + ", expected " + std::to_string(members[i]);
  }
  return "";
}

// Makes the parent communicator for a thread- or process-rank from a shared id.
std::string InitParent(const braidUniqueId& id, int rank, int size, braidComm_t* comm) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = 60000;
  if (braidCommInitRankConfig(comm, size, id, rank, &config) != braidSuccess) {
    return Error("init", nullptr);
  }
  return "";
}

std::string SplitAndCheck(braidComm_t parent, const SplitRule& rule, int rank, int size) {
  braidComm_t child = nullptr;
  int color = rule.color(rank, size);
  if (braidCommSplit(parent, color, rule.key(rank, size), &child, nullptr) != braidSuccess) {
    return Error("split", parent);
  }
  if (color == BRAID_SPLIT_NOCOLOR) return child == nullptr ? "" : "NOCOLOR returned a communicator";
  if (child == nullptr) return "split returned no communicator";
  std::string result = CheckChild(child, ExpectedMembers(rule, rank, size), rank);
  braidCommDestroy(child);
  return result;
}

braidUniqueId NewId() {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  return id;
}

const std::vector<std::pair<const char*, SplitRule>>& Rules() {
  static const std::vector<std::pair<const char*, SplitRule>> rules = {
      {"even/odd", {[](int r, int) { return r % 2; }, [](int r, int) { return r; }}},
      {"halves, reversed keys", {[](int r, int n) { return r < n / 2 ? 0 : 1; }, [](int r, int) { return -r; }}},
      {"singletons", {[](int r, int) { return r; }, [](int, int) { return 0; }}},
      {"one group, equal keys (parent order breaks ties)", {[](int, int) { return 5; }, [](int, int) { return 1; }}},
      {"NOCOLOR for odd ranks", {[](int r, int) { return r % 2 ? BRAID_SPLIT_NOCOLOR : 0; }, [](int r, int) { return r; }}},
      {"three colors, keys descending by rank mod 3", {[](int r, int) { return r % 3; }, [](int r, int) { return 10 - r / 3; }}},
  };
  return rules;
}

}  // namespace

TEST_CASE("split rules at 4 and 8 ranks, ranks as threads", "[split]") {
  const int size = GENERATE(4, 8);
  braidUniqueId id = NewId();
  auto results = RunThreads(size, [&](int rank, int n) -> std::string {
    braidComm_t parent = nullptr;
    std::string failure = InitParent(id, rank, n, &parent);
    for (const auto& [name, rule] : Rules()) {
      if (!failure.empty()) break;
      failure = SplitAndCheck(parent, rule, rank, n);
      if (!failure.empty()) failure = std::string(name) + ": " + failure;
    }
    if (parent) braidCommDestroy(parent);
    return failure;
  });
  CAPTURE(size);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("split in separate processes", "[split][processes]") {
  braidUniqueId id = NewId();
  auto results = RunProcesses(4, [&](int rank, int n) -> std::string {
    braidComm_t parent = nullptr;
    std::string failure = InitParent(id, rank, n, &parent);
    if (failure.empty()) failure = SplitAndCheck(parent, Rules()[0].second, rank, n);
    if (failure.empty()) failure = SplitAndCheck(parent, Rules()[4].second, rank, n);
    return failure;
  }, 120000);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("nested splits", "[split]") {
  braidUniqueId id = NewId();
  auto results = RunThreads(8, [&](int rank, int n) -> std::string {
    braidComm_t parent = nullptr, half = nullptr, quarter = nullptr;
    std::string failure = InitParent(id, rank, n, &parent);
    if (!failure.empty()) return failure;
    if (braidCommSplit(parent, rank / 4, rank, &half, nullptr) != braidSuccess) return Error("split 1", parent);
    // Inside each half (4 ranks), split again by parity of the half-rank.
    int half_rank = -1;
    braidCommUserRank(half, &half_rank);
    if (braidCommSplit(half, half_rank % 2, half_rank, &quarter, nullptr) != braidSuccess) return Error("split 2", half);
    // quarter members: same rank/4 and same parity of rank%4, ordered by rank.
    std::vector<int> members;
    for (int r = 0; r < n; ++r) {
      if (r / 4 == rank / 4 && (r % 4) % 2 == half_rank % 2) members.push_back(r);
    }
    failure = CheckChild(quarter, members, rank);
    braidCommDestroy(quarter);
    braidCommDestroy(half);
    braidCommDestroy(parent);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("sibling communicators run collectives concurrently from threads", "[split][concurrent]") {
  braidUniqueId id = NewId();
  auto results = RunThreads(4, [&](int rank, int n) -> std::string {
    braidComm_t parent = nullptr, parity = nullptr, halves = nullptr;
    std::string failure = InitParent(id, rank, n, &parent);
    if (!failure.empty()) return failure;
    if (braidCommSplit(parent, rank % 2, rank, &parity, nullptr) != braidSuccess) return Error("split parity", parent);
    if (braidCommSplit(parent, rank / 2, rank, &halves, nullptr) != braidSuccess) return Error("split halves", parent);
    // Two threads per rank, each hammering its own child; plus the parent from this thread.
    std::string errors[2];
    auto hammer = [&](braidComm_t comm, int which, int64_t expected_sum) {
      for (int i = 0; i < 200 && errors[which].empty(); ++i) {
        std::vector<int64_t> data(1000, rank + i);
        if (braidAllReduce(data.data(), data.data(), data.size(), braidInt64, braidSum, comm, nullptr) != braidSuccess) {
          errors[which] = Error("concurrent allreduce", comm);
        } else if (data[999] != expected_sum + 2 * i) {
          errors[which] = "iteration " + std::to_string(i) + ": sum " + std::to_string(data[999]);
        }
      }
    };
    int64_t parity_sum = rank % 2 == 0 ? 0 + 2 : 1 + 3;
    int64_t halves_sum = rank / 2 == 0 ? 0 + 1 : 2 + 3;
    std::thread a(hammer, parity, 0, parity_sum);
    std::thread b(hammer, halves, 1, halves_sum);
    int64_t total = rank;
    for (int i = 0; i < 50 && failure.empty(); ++i) {
      total = rank;
      if (braidAllReduce(&total, &total, 1, braidInt64, braidSum, parent, nullptr) != braidSuccess) failure = Error("parent allreduce", parent);
      else if (total != 6) failure = "parent sum " + std::to_string(total);
    }
    a.join();
    b.join();
    for (auto& e : errors) if (failure.empty()) failure = e;
    braidCommDestroy(parity);
    braidCommDestroy(halves);
    braidCommDestroy(parent);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("a child outlives its parent and a parent outlives its child", "[split][lifetime]") {
  braidUniqueId id = NewId();
  auto results = RunThreads(4, [&](int rank, int n) -> std::string {
    braidComm_t parent = nullptr, first = nullptr, second = nullptr;
    std::string failure = InitParent(id, rank, n, &parent);
    if (!failure.empty()) return failure;
    if (braidCommSplit(parent, rank % 2, rank, &first, nullptr) != braidSuccess) return Error("split", parent);
    if (braidCommDestroy(first) != braidSuccess) return Error("destroy child", first);
    // The parent goes on after its child is gone...
    int64_t v = 1;
    if (braidAllReduce(&v, &v, 1, braidInt64, braidSum, parent, nullptr) != braidSuccess || v != n) return Error("parent after child destroyed", parent);
    if (braidCommSplit(parent, rank / 2, rank, &second, nullptr) != braidSuccess) return Error("split again", parent);
    if (braidCommDestroy(parent) != braidSuccess) return Error("destroy parent", nullptr);
    // ...and a child goes on after its parent is gone.
    std::vector<int> members = {rank / 2 * 2, rank / 2 * 2 + 1};
    failure = CheckChild(second, members, rank);
    braidCommDestroy(second);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("ranks {0,2} reduce and gather while ranks {1,3} do something else", "[split][seed]") {
  braidUniqueId id = NewId();
  auto results = RunThreads(4, [&](int rank, int n) -> std::string {
    braidComm_t parent = nullptr, group = nullptr;
    std::string failure = InitParent(id, rank, n, &parent);
    if (!failure.empty()) return failure;
    // new_group([0, 2]) style: members get color 0, the others color 1 (their own group).
    if (braidCommSplit(parent, rank % 2, rank, &group, nullptr) != braidSuccess) return Error("split", parent);
    if (rank % 2 == 0) {
      float x[3] = {1.0f * rank, 2.0f * rank, 3.0f};
      if (braidAllReduce(x, x, 3, braidFloat32, braidSum, group, nullptr) != braidSuccess) return Error("allreduce", group);
      if (x[0] != 2.0f || x[1] != 4.0f || x[2] != 6.0f) return "allreduce over {0,2} is wrong";
      float mine[2] = {1.0f * rank, -1.0f * rank}, all[4] = {};
      if (braidAllGather(mine, all, 2, braidFloat32, group, nullptr) != braidSuccess) return Error("allgather", group);
      if (all[0] != 0 || all[1] != 0 || all[2] != 2 || all[3] != -2) return "allgather over {0,2} is wrong";
    } else {
      // Meanwhile {1,3} run a different sequence on their own communicator.
      for (int i = 0; i < 5; ++i) {
        int64_t v = rank * 10 + i;
        if (braidAllReduce(&v, &v, 1, braidInt64, braidMax, group, nullptr) != braidSuccess) return Error("allreduce {1,3}", group);
        if (v != 30 + i) return "max over {1,3} is wrong";
      }
    }
    braidCommDestroy(group);
    braidCommDestroy(parent);
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("a communicator over a subset made directly from a fresh unique id", "[split][subset]") {
  braidUniqueId world_id = NewId(), subset_id = NewId();
  auto results = RunThreads(4, [&](int rank, int n) -> std::string {
    braidComm_t world = nullptr, subset = nullptr;
    std::string failure = InitParent(world_id, rank, n, &world);
    if (!failure.empty()) return failure;
    if (rank == 1 || rank == 3) {
      if (braidCommInitRank(&subset, 2, subset_id, rank / 2) != braidSuccess) return Error("subset init", nullptr);
      failure = CheckChild(subset, {1, 3}, rank);
      braidCommDestroy(subset);
    }
    int64_t v = 1;
    if (failure.empty() && (braidAllReduce(&v, &v, 1, braidInt64, braidSum, world, nullptr) != braidSuccess || v != 4)) failure = Error("world", world);
    braidCommDestroy(world);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}
