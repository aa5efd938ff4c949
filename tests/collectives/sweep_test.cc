// Every collective × every algorithm braid registers for it × transport × ranks as threads or
// processes × world size × count × datatype × op × in place / out of place × root, against the
// serial references (collective_checks.h, reference.h), in one binary.
//
// The algorithm is forced per communicator through braidConfig_t::algo ("<collective>:<name>"),
// the transport through braidConfig_t::transports, so one process runs the whole matrix. The
// algorithm list comes from the registry (algorithms/registry.cc): an algorithm registered there
// is swept here without a line of test code. The transport list is kTransports below: verbs and
// cuda_ipc join it when they can run on the CI host.
//
// The matrix, per collective and algorithm (sizes chosen to keep the suite inside CI's time):
//   shm, threads:  1-5 and 8 ranks; counts 0, 1, 7, 1021 with every dtype × op × root; a
//                  tiny chunk with a mid-size prime count (every piece a pipelined slice, the
//                  last ragged) on 2, 3, 5, 8 ranks; a large prime count on the same sizes with
//                  every dtype × op at roots 0 and n-1.
//                  Plus the cost model's own choice (config.algo "") on 3, 5, 8 ranks.
//   each other transport (kTransports: tcp), threads: 2, 3, 5, 8 ranks with the small counts;
//                  the tiny-chunk count on 3 and 5 ranks; the large count on 3 (every dtype
//                  once, ops rotating so each runs twice).
//   processes:     2, 3, 5 ranks over the default transports; small and large counts (the large
//                  as over tcp).
// Each (collective, group) is one TEST_CASE, tagged so tests/collectives/BUILD can run parts of
// the binary side by side.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "bindings/c/braid.h"
#include "tests/collectives/collective_checks.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

// The transports swept besides shm (which the thread group forces): a new transport that can run
// on the CI host is one entry here.
const char* const kTransports[] = {"tcp"};

constexpr int kDefaultChunk = BRAID_CONFIG_UNDEF_INT;  // braid's (512 KiB)
constexpr int kTinyChunk = 512;
constexpr size_t kMidCount = 4099;                       // prime: with kTinyChunk, ragged slices
constexpr size_t kLargeCount = (size_t{1} << 18) + 3;    // 262147, prime
constexpr size_t kLargePerPeerCount = (size_t{1} << 17) - 1;  // 131071, prime; × ranks per buffer
const std::vector<size_t> kSmallCounts = {0, 1, 7, 1021};

// kLarge: the large count with every dtype × op; the *Sample ones: every dtype once, ops rotating.
enum class Counts { kSmall, kPipelined, kLarge, kLargeSample, kSmallAndLargeSample };

struct Plan {
  std::string algo;                  // config.algo: "<collective>:<name>", or "" (cost model)
  const char* transports = nullptr;  // config.transports; nullptr: the default (shm on one host)
  Ranks ranks = Ranks::kThreads;
  int size = 2;
  Counts counts = Counts::kSmall;
};

enum class Group { kShmThreads, kTransportThreads, kProcesses };

// The registry's algorithms for `coll`.
std::vector<std::string> AlgorithmsFor(Coll coll) {
  algorithms::Collective kind;
  std::vector<std::string> names;
  if (!algorithms::ParseCollective(CollName(coll), &kind)) return names;
  for (const algorithms::Algorithm& a : algorithms::Algorithms()) {
    if (a.kind == kind) names.push_back(a.name);
  }
  return names;
}

std::vector<Plan> Plans(Coll coll, Group group) {
  std::vector<Plan> plans;
  auto add = [&](const std::string& algo, const char* transports, Ranks ranks,
                 std::initializer_list<int> sizes, Counts counts) {
    for (int size : sizes) {
      // A lone rank has no peer to link: it runs on the default transports.
      plans.push_back({algo, size == 1 ? nullptr : transports, ranks, size, counts});
    }
  };
  for (const std::string& name : AlgorithmsFor(coll)) {
    const std::string algo = std::string(CollName(coll)) + ":" + name;
    switch (group) {
      case Group::kShmThreads:
        add(algo, "shm", Ranks::kThreads, {1, 2, 3, 4, 5, 8}, Counts::kSmall);
        add(algo, "shm", Ranks::kThreads, {2, 3, 5, 8}, Counts::kPipelined);
        add(algo, "shm", Ranks::kThreads, {2, 3, 5, 8}, Counts::kLarge);
        break;
      case Group::kTransportThreads:
        for (const char* transport : kTransports) {
          add(algo, transport, Ranks::kThreads, {2, 3, 5, 8}, Counts::kSmall);
          add(algo, transport, Ranks::kThreads, {3, 5}, Counts::kPipelined);
          add(algo, transport, Ranks::kThreads, {3}, Counts::kLargeSample);
        }
        break;
      case Group::kProcesses:
        add(algo, nullptr, Ranks::kProcesses, {2, 3, 5}, Counts::kSmallAndLargeSample);
        break;
    }
  }
  // What users get: no constraint ("" replaces any BRAID_ALGO), the cost model's choice with its
  // ties settled by timed trials, which switch algorithms between calls of one communicator.
  if (group == Group::kShmThreads) add("", "shm", Ranks::kThreads, {3, 5, 8}, Counts::kSmall);
  return plans;
}

std::string Describe(const Plan& plan) {
  std::string counts = plan.counts == Counts::kSmall       ? "small counts"
                       : plan.counts == Counts::kPipelined ? "tiny chunks"
                       : plan.counts == Counts::kLarge     ? "large count"
                       : plan.counts == Counts::kLargeSample ? "large count, sampled"
                                                             : "small and large counts";
  return (plan.algo.empty() ? std::string("cost model's choice") : plan.algo) + ", " + counts;
}

// The calls of one plan on `size` ranks: small and mid counts run the full product. The large
// count runs roots 0 and size - 1 only, with every dtype × op (Counts::kLarge) or every dtype once,
// ops rotating so each op runs twice (the sampled ones).
std::vector<Call> Calls(Coll coll, Counts counts, int size) {
  std::vector<size_t> list;
  if (counts == Counts::kSmall || counts == Counts::kSmallAndLargeSample) list = kSmallCounts;
  if (counts == Counts::kPipelined) list = {kMidCount};
  const bool per_peer = coll == Coll::kAllGather || coll == Coll::kReduceScatter ||
                        coll == Coll::kAllToAll || coll == Coll::kGather || coll == Coll::kScatter;
  const size_t large = per_peer ? kLargePerPeerCount : kLargeCount;
  if (counts == Counts::kLarge || counts == Counts::kLargeSample ||
      counts == Counts::kSmallAndLargeSample) {
    list.push_back(large);
  }

  std::vector<Call> calls;
  const int ops = Reduces(coll) ? braidNumOps : 1;
  const int roots = Rooted(coll) ? size : 1;
  for (size_t count : list) {
    const bool is_large = count == large;
    for (int t = 0; t < braidNumTypes; ++t) {
      for (int o = 0; o < ops; ++o) {
        if (is_large && counts != Counts::kLarge && ops > 1 && o != t % braidNumOps) continue;
        for (int root = 0; root < roots; ++root) {
          if (is_large && root != 0 && root != roots - 1) continue;
          for (bool in_place : {false, true}) {
            Call call;
            call.coll = coll;
            call.type = static_cast<braidDataType_t>(t);
            call.op = static_cast<braidRedOp_t>(o);
            call.count = count;
            call.in_place = in_place;
            call.root = root;
            calls.push_back(call);
          }
        }
      }
    }
  }
  return calls;
}

void Sweep(Coll coll, Group group) {
  const std::vector<Plan> plans = Plans(coll, group);
  REQUIRE(!plans.empty());  // the registry has at least one algorithm for every collective
  const size_t index = GENERATE_COPY(range(size_t{0}, plans.size()));
  const Plan& plan = plans[index];

  CommJob job;
  job.size = plan.size;
  job.ranks = plan.ranks;
  job.config.transports = plan.transports;
  job.config.algo = plan.algo.c_str();
  job.config.chunkBytes = plan.counts == Counts::kPipelined ? kTinyChunk : kDefaultChunk;
  CAPTURE(Describe(plan), Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int size) -> std::string {
    for (const Call& call : Calls(coll, plan.counts, size)) {
      std::string wrong = RunAndCheck(comm, rank, size, call);
      if (!wrong.empty()) return wrong;
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

}  // namespace

// config.algo = "<collective>:<name>" forces exactly that algorithm whatever the size: what
// makes the sweeps below test the algorithm they name. (tests/bindings/config_algo_test checks
// that the field reaches the communicator.)
TEST_CASE("each registered algorithm, forced, is the one selected at every size", "[algo]") {
  REQUIRE(!algorithms::Algorithms().empty());
  for (const algorithms::Algorithm& a : algorithms::Algorithms()) {
    const std::string spec = std::string(algorithms::CollectiveName(a.kind)) + ":" + a.name;
    CAPTURE(spec);
    auto policy = algorithms::AlgorithmPolicy::Parse(spec);
    REQUIRE(policy.ok());
    for (int n : {2, 3, 8, 64}) {
      for (size_t count : {size_t{1}, size_t{1} << 10, size_t{1} << 28}) {
        CAPTURE(n, count);
        algorithms::CollectiveArgs args;
        args.kind = a.kind;
        args.count = count;
        auto chosen = algorithms::SelectAlgorithm(args, n, policy.value(), algorithms::LinkModel());
        REQUIRE(chosen.ok());
        CHECK(chosen.value() == &a);
      }
    }
  }
}

#define BRAID_SWEEP(coll, tag)                                                         \
  TEST_CASE(tag " matches the reference, every algorithm: shm, ranks as threads",      \
            "[" tag "][shm]") {                                                        \
    Sweep(coll, Group::kShmThreads);                                                   \
  }                                                                                    \
  TEST_CASE(tag " matches the reference, every algorithm: other transports, threads",  \
            "[" tag "][transports]") {                                                 \
    Sweep(coll, Group::kTransportThreads);                                             \
  }                                                                                    \
  TEST_CASE(tag " matches the reference, every algorithm: ranks as processes",         \
            "[" tag "][processes]") {                                                  \
    Sweep(coll, Group::kProcesses);                                                    \
  }

BRAID_SWEEP(Coll::kAllReduce, "allreduce")
BRAID_SWEEP(Coll::kBroadcast, "broadcast")
BRAID_SWEEP(Coll::kReduce, "reduce")
BRAID_SWEEP(Coll::kAllGather, "allgather")
BRAID_SWEEP(Coll::kReduceScatter, "reducescatter")
BRAID_SWEEP(Coll::kAllToAll, "alltoall")
BRAID_SWEEP(Coll::kGather, "gather")
BRAID_SWEEP(Coll::kScatter, "scatter")

}  // namespace braid::testing
