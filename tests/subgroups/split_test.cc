// braidCommSplit with NCCL's semantics, and many communicators used at once.
//
// Each rank computes what its child communicator must look like (rank, size, members) from the
// colors and keys alone, and checks it with collectives whose results name the members: an
// allreduce of parent ranks (sum over the members) and an allgather of parent ranks (the members
// in child-rank order).
#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace {

using braid::testing::CommJob;
using braid::testing::Failures;
using braid::testing::NewId;
using braid::testing::Ranks;
using braid::testing::RunComms;

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

// The fixture's job for a parent of `size` ranks.
// `transports`: BRAID_TRANSPORTS for the parent (and its children), nullptr = environment's.
CommJob ParentJob(int size, Ranks ranks = Ranks::kThreads, const char* transports = nullptr) {
  CommJob job;
  job.size = size;
  job.ranks = ranks;
  job.config.timeoutMs = 60000;
  job.config.transports = transports;
  return job;
}

// `split_share`: the child's config.splitShare (BRAID_CONFIG_UNDEF_INT = environment's default).
braidConfig_t ChildConfig(int split_share) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = 60000;
  config.splitShare = split_share;
  return config;
}

std::string SplitAndCheck(braidComm_t parent, const SplitRule& rule, int rank, int size,
                          int split_share = BRAID_CONFIG_UNDEF_INT) {
  braidComm_t child = nullptr;
  int color = rule.color(rank, size);
  braidConfig_t config = ChildConfig(split_share);
  if (braidCommSplit(parent, color, rule.key(rank, size), &child, &config) != braidSuccess) {
    return Error("split", parent);
  }
  if (color == BRAID_SPLIT_NOCOLOR) return child == nullptr ? "" : "NOCOLOR returned a communicator";
  if (child == nullptr) return "split returned no communicator";
  std::string result = CheckChild(child, ExpectedMembers(rule, rank, size), rank);
  braidCommDestroy(child);
  return result;
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
  auto results = RunComms(ParentJob(size), [&](braidComm_t parent, int rank, int n) -> std::string {
    std::string failure;
    for (const auto& [name, rule] : Rules()) {
      if (!failure.empty()) break;
      failure = SplitAndCheck(parent, rule, rank, n);
      if (!failure.empty()) failure = std::string(name) + ": " + failure;
    }
    return failure;
  });
  CAPTURE(size);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("split in separate processes", "[split][processes]") {
  auto results = RunComms(ParentJob(4, Ranks::kProcesses), [&](braidComm_t parent, int rank, int n) -> std::string {
    std::string failure = SplitAndCheck(parent, Rules()[0].second, rank, n);
    if (failure.empty()) failure = SplitAndCheck(parent, Rules()[4].second, rank, n);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("nested splits", "[split]") {
  auto results = RunComms(ParentJob(8), [&](braidComm_t parent, int rank, int n) -> std::string {
    braidComm_t half = nullptr, quarter = nullptr;
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
    std::string failure = CheckChild(quarter, members, rank);
    braidCommDestroy(quarter);
    braidCommDestroy(half);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("sibling communicators run collectives concurrently from threads", "[split][concurrent]") {
  auto results = RunComms(ParentJob(4), [&](braidComm_t parent, int rank, int) -> std::string {
    braidComm_t parity = nullptr, halves = nullptr;
    std::string failure;
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
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// Destroys the parent itself, mid-body (the job's body_destroys).
TEST_CASE("a child outlives its parent and a parent outlives its child", "[split][lifetime]") {
  CommJob job = ParentJob(4);
  job.body_destroys = true;
  auto results = RunComms(job, [&](braidComm_t parent, int rank, int n) -> std::string {
    braidComm_t first = nullptr, second = nullptr;
    std::string failure;
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
  auto results = RunComms(ParentJob(4), [&](braidComm_t parent, int rank, int) -> std::string {
    braidComm_t group = nullptr;
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
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// The subset's own init is what this checks, so ranks 1 and 3 make it themselves.
TEST_CASE("a communicator over a subset made directly from a fresh unique id", "[split][subset]") {
  braidUniqueId subset_id = NewId();
  auto results = RunComms(ParentJob(4), [&](braidComm_t world, int rank, int) -> std::string {
    braidComm_t subset = nullptr;
    std::string failure;
    if (rank == 1 || rank == 3) {
      if (braidCommInitRank(&subset, 2, subset_id, rank / 2) != braidSuccess) return Error("subset init", nullptr);
      failure = CheckChild(subset, {1, 3}, rank);
      braidCommDestroy(subset);
    }
    int64_t v = 1;
    if (failure.empty() && (braidAllReduce(&v, &v, 1, braidInt64, braidSum, world, nullptr) != braidSuccess || v != 4)) failure = Error("world", world);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// --- splitShare: a child reaches its peers through its parent's links --------------------------

namespace {

// Checks the parent still works (and its links are still in step) after a child used them.
std::string CheckParent(braidComm_t parent, int size) {
  int64_t v = 1;
  if (braidAllReduce(&v, &v, 1, braidInt64, braidSum, parent, nullptr) != braidSuccess) {
    return Error("parent allreduce after a sharing child", parent);
  }
  return v == size ? "" : "parent allreduce gave " + std::to_string(v);
}

// Descriptors this process holds open (sockets, memfd segments, eventfds...).
int OpenDescriptors() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++count;
    }
    closedir(dir);
  }
  return count - 1;  // the directory stream itself
}

}  // namespace

TEST_CASE("splitShare: every split rule at 4 and 8 ranks, parent interleaved", "[split][share]") {
  const int size = GENERATE(4, 8);
  auto results = RunComms(ParentJob(size), [&](braidComm_t parent, int rank, int n) -> std::string {
    std::string failure;
    for (const auto& [name, rule] : Rules()) {
      if (failure.empty()) failure = SplitAndCheck(parent, rule, rank, n, /*split_share=*/1);
      if (failure.empty()) failure = CheckParent(parent, n);
      if (!failure.empty()) failure = std::string(name) + ": " + failure;
    }
    return failure;
  });
  CAPTURE(size);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

// Destroys the parent itself, mid-body (the job's body_destroys).
TEST_CASE("splitShare: nested splits share the root's links; lifetimes are independent", "[split][share]") {
  CommJob job = ParentJob(8);
  job.body_destroys = true;
  auto results = RunComms(job, [&](braidComm_t parent, int rank, int n) -> std::string {
    braidComm_t half = nullptr, quarter = nullptr;
    std::string failure;
    braidConfig_t share = ChildConfig(1);
    if (braidCommSplit(parent, rank / 4, rank, &half, &share) != braidSuccess) return Error("split 1", parent);
    int half_rank = -1;
    braidCommUserRank(half, &half_rank);
    if (braidCommSplit(half, half_rank % 2, half_rank, &quarter, &share) != braidSuccess) return Error("split 2", half);
    std::vector<int> members;
    for (int r = 0; r < n; ++r) {
      if (r / 4 == rank / 4 && (r % 4) % 2 == half_rank % 2) members.push_back(r);
    }
    // Parent, grandchild, child, in the same order on every rank (they take turns on the links).
    failure = CheckParent(parent, n);
    if (failure.empty()) failure = CheckChild(quarter, members, rank);
    if (failure.empty()) failure = CheckParent(half, 4);
    // The parent goes away; the shared links stay for the children.
    if (failure.empty() && braidCommDestroy(parent) != braidSuccess) failure = Error("destroy parent", nullptr);
    if (failure.empty()) failure = CheckChild(quarter, members, rank);
    // A child goes away; its own child goes on.
    if (failure.empty() && braidCommDestroy(half) != braidSuccess) failure = Error("destroy half", nullptr);
    if (failure.empty()) failure = CheckChild(quarter, members, rank);
    braidCommDestroy(quarter);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("splitShare: members of one color that disagree are told so", "[split][share]") {
  auto results = RunComms(ParentJob(4), [&](braidComm_t parent, int rank, int) -> std::string {
    braidComm_t child = nullptr;
    // Color 0 = {0, 1} disagrees (rank 0 shares, rank 1 does not); color 1 = {2, 3} agrees.
    braidConfig_t config = ChildConfig(rank == 0 || rank >= 2 ? 1 : 0);
    braidResult_t result = braidCommSplit(parent, rank / 2, rank, &child, &config);
    if (rank < 2) {
      if (result != braidInvalidUsage) return "disagreeing split returned " + std::to_string(result);
      std::string message = braidGetLastError(parent);
      if (message.find("splitShare") == std::string::npos || message.find(rank == 0 ? "rank 1" : "rank 0") == std::string::npos) {
        return "message does not name splitShare and the other rank: " + message;
      }
      return "";
    }
    if (result != braidSuccess) return Error("agreeing split", parent);
    std::string failure = CheckChild(child, {2, 3}, rank);
    braidCommDestroy(child);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("splitShare: a child over the parent's ring neighbours opens no transport resources", "[split][share][processes]") {
  // One process per rank, so /proc/self/fd counts one rank's descriptors. The parent's ring links
  // exist after its first allreduce. A sharing child over the same ranks in the same order then
  // adds exactly one descriptor per rank: the store connection its hang-diagnosis thread parks in.
  // A child with its own transports adds listeners, io threads' descriptors and links.
  const char* transports = GENERATE("shm", "tcp");
  auto results = RunComms(ParentJob(4, Ranks::kProcesses, transports), [&](braidComm_t parent, int rank, int n) -> std::string {
    braidComm_t shared = nullptr, own = nullptr;
    std::string failure;
    if (!(failure = CheckParent(parent, n)).empty()) return failure;
    const int before = OpenDescriptors();
    braidConfig_t share = ChildConfig(1), no_share = ChildConfig(0);
    share.transports = no_share.transports = transports;
    if (braidCommSplit(parent, 0, rank, &shared, &share) != braidSuccess) return Error("shared split", parent);
    for (int i = 0; i < 3 && failure.empty(); ++i) failure = CheckParent(shared, n);
    if (!failure.empty()) return failure;
    const int shared_added = OpenDescriptors() - before;
    if (braidCommSplit(parent, 0, rank, &own, &no_share) != braidSuccess) return Error("own split", parent);
    if (!(failure = CheckParent(own, n)).empty()) return failure;
    const int own_added = OpenDescriptors() - before - shared_added;
    braidCommDestroy(own);
    braidCommDestroy(shared);
    if (!(failure = CheckParent(parent, n)).empty()) return failure;
    if (shared_added != 1) return "a sharing child added " + std::to_string(shared_added) + " descriptors, expected 1";
    if (own_added <= shared_added + 2) {
      return "a child with its own transports added only " + std::to_string(own_added) + " descriptors";
    }
    return "";
  });
  CAPTURE(transports);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}
