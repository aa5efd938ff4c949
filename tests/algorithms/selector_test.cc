// BRAID_ALGO parsing (NCCL_ALGO's list syntax), policy semantics, and cost-model selection.
//
// Written against the live registry: cases name algorithms of the tree family and ring allreduce,
// which exist; properties that must hold for every algorithm (non-negative, size-monotonic costs)
// walk the whole registry, so algorithms added later are checked too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "bindings/c/braid.h"

namespace braid::algorithms {
namespace {

std::vector<std::string> NamesFor(Collective kind) {
  std::vector<std::string> names;
  for (const Algorithm& a : Algorithms()) {
    if (a.kind == kind) names.push_back(a.name);
  }
  return names;
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

AlgorithmPolicy MustParse(const std::string& spec) {
  auto policy = AlgorithmPolicy::Parse(spec);
  INFO(spec << ": " << policy.status().ToString());
  REQUIRE(policy.ok());
  return policy.value();
}

const char* Pick(Collective kind, size_t bytes, int nranks, const AlgorithmPolicy& policy,
                 const LinkModel& link = LinkModel()) {
  CollectiveArgs args;
  args.kind = kind;
  args.type = DataType::kUint8;
  args.count = bytes;
  auto chosen = SelectAlgorithm(args, nranks, policy, link);
  INFO(chosen.status().ToString());
  REQUIRE(chosen.ok());
  return chosen.value()->name;
}

}  // namespace

TEST_CASE("BRAID_ALGO specs that parse", "[selector][parse]") {
  const char* spec = GENERATE("", ";", " ; ; ", "ring", "RING", "Tree", "ring,tree", " ring , tree ",
                              "^tree", "^ring,rd", "allreduce:tree", "ALLREDUCE:TREE",
                              " allreduce : tree ; broadcast : binomial ", "allreduce:tree,ring;",
                              "allreduce:^ring", "allreduce:^ring,rd", "reduce:binomial",
                              "^ring;allreduce:ring", "ring,tree;allreduce:rd;broadcast:binomial",
                              "allreduce:rhd;reduce:binomial;broadcast:binomial");
  CAPTURE(spec);
  auto policy = AlgorithmPolicy::Parse(spec);
  INFO(policy.status().ToString());
  CHECK(policy.ok());
  if (policy.ok()) CHECK(policy.value().spec() == spec);
}

TEST_CASE("BRAID_ALGO specs that fail name the culprit", "[selector][parse]") {
  struct Case {
    std::string spec;
    std::vector<std::string> message_has;
  };
  const std::string all_allreduce = Join(NamesFor(Collective::kAllReduce));
  const std::vector<Case> cases = {
      {"bogus", {"BRAID_ALGO='bogus'", "unknown algorithm 'bogus'"}},
      {"ring,bogus", {"unknown algorithm 'bogus'"}},
      {"^bogus", {"unknown algorithm 'bogus'"}},
      {"allreduce:bogus", {"unknown algorithm 'bogus' for allreduce", "it has:", "ring", "tree"}},
      // binomial exists, but not for allreduce.
      {"allreduce:binomial", {"unknown algorithm 'binomial' for allreduce"}},
      {"broadcast:rd", {"unknown algorithm 'rd' for broadcast", "binomial"}},
      {"allredux:ring", {"unknown collective 'allredux'"}},
      {":ring", {"unknown collective ''"}},
      {"allreduce:", {"entry 'allreduce:' names no algorithm"}},
      {"allreduce:^", {"names no algorithm"}},
      {"^", {"names no algorithm"}},
      {"allreduce: , ", {"names no algorithm"}},
      {"ring;tree", {"entry 'tree' names no collective", "only the first entry"}},
      {"allreduce:tree;ring", {"entry 'ring' names no collective"}},
      {"allreduce:ring;allreduce:tree", {"allreduce is given more than once"}},
      {"allreduce:^" + all_allreduce, {"leaves no algorithm for allreduce", "it has:"}},
      {"reduce:^" + Join(NamesFor(Collective::kReduce)), {"leaves no algorithm for reduce"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    auto policy = AlgorithmPolicy::Parse(c.spec);
    REQUIRE_FALSE(policy.ok());
    CHECK(policy.status().code() == Code::kInvalidArgument);
    for (const std::string& part : c.message_has) {
      CAPTURE(part);
      CHECK(policy.status().message().find(part) != std::string::npos);
    }
  }
}

TEST_CASE("BRAID_ALGO allows what the spec says, per collective", "[selector][policy]") {
  const bool broadcast_has_ring = FindAlgorithm(Collective::kBroadcast, "ring") != nullptr;
  const bool reduce_has_only_binomial = NamesFor(Collective::kReduce).size() == 1;
  struct Case {
    std::string spec;
    Collective kind;
    const char* algorithm;
    bool allowed;
  };
  const std::vector<Case> cases = {
      {"", Collective::kAllReduce, "ring", true},
      {"", Collective::kAllReduce, "tree", true},
      {"allreduce:tree", Collective::kAllReduce, "tree", true},
      {"allreduce:tree", Collective::kAllReduce, "TREE", true},
      {"allreduce:tree", Collective::kAllReduce, "ring", false},
      {"allreduce:tree", Collective::kBroadcast, "binomial", true},  // others unconstrained
      {"ALLREDUCE:Tree", Collective::kAllReduce, "tree", true},
      {"allreduce:tree,rd", Collective::kAllReduce, "rd", true},
      {"allreduce:tree,rd", Collective::kAllReduce, "rhd", false},
      {"^tree", Collective::kAllReduce, "tree", false},
      {"^tree", Collective::kAllReduce, "ring", true},
      {"^tree", Collective::kBroadcast, "binomial", true},
      {"allreduce:^ring,rd", Collective::kAllReduce, "ring", false},
      {"allreduce:^ring,rd", Collective::kAllReduce, "rd", false},
      {"allreduce:^ring,rd", Collective::kAllReduce, "tree", true},
      {"allreduce:^ring,rd", Collective::kAllReduce, "rhd", true},
      {"allreduce:^ring,rd", Collective::kReduce, "binomial", true},
      // A global inclusion constrains only collectives that have one of its names...
      {"ring", Collective::kAllReduce, "ring", true},
      {"ring", Collective::kAllReduce, "tree", false},
      {"ring", Collective::kBroadcast, "binomial", !broadcast_has_ring},
      {"tree", Collective::kReduce, "binomial", true},
      // ...and a per-collective list replaces the global one for its collective (NCCL).
      {"^ring;allreduce:ring", Collective::kAllReduce, "ring", true},
      {"^ring;allreduce:ring", Collective::kAllReduce, "tree", false},
      {"ring;allreduce:tree", Collective::kAllReduce, "ring", false},
      {"ring;allreduce:tree", Collective::kAllReduce, "tree", true},
      {"rd;reduce:binomial", Collective::kAllReduce, "rd", true},
      {"rd;reduce:binomial", Collective::kAllReduce, "ring", false},
      // A global exclusion never leaves a collective empty.
      {"^binomial", Collective::kReduce, "binomial", reduce_has_only_binomial},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec, CollectiveName(c.kind), c.algorithm);
    CHECK(MustParse(c.spec).Allows(c.kind, c.algorithm) == c.allowed);
  }
}

TEST_CASE("every collective with algorithms keeps one under any global list",
          "[selector][policy]") {
  const char* spec = GENERATE("ring", "^ring", "tree", "^tree", "binomial", "^binomial", "rd,rhd");
  AlgorithmPolicy policy = MustParse(spec);
  for (int k = 0; k < kNumCollectives; ++k) {
    auto kind = static_cast<Collective>(k);
    if (NamesFor(kind).empty()) continue;
    CAPTURE(spec, CollectiveName(kind));
    CollectiveArgs args;
    args.kind = kind;
    args.count = 1024;
    CHECK(SelectAlgorithm(args, 4, policy, LinkModel()).ok());
  }
}

TEST_CASE("forced algorithms win at every size and rank count", "[selector][select]") {
  struct Case {
    const char* spec;
    Collective kind;
    const char* expected;
  };
  const Case cases[] = {
      {"allreduce:tree", Collective::kAllReduce, "tree"},
      {"allreduce:ring", Collective::kAllReduce, "ring"},
      {"allreduce:rd", Collective::kAllReduce, "rd"},
      {"allreduce:rhd", Collective::kAllReduce, "rhd"},
      {"broadcast:binomial", Collective::kBroadcast, "binomial"},
      {"reduce:binomial", Collective::kReduce, "binomial"},
  };
  for (const Case& c : cases) {
    AlgorithmPolicy policy = MustParse(c.spec);
    for (int n : {1, 2, 3, 4, 5, 8, 16, 64, 1000}) {
      for (size_t bytes : {size_t{1}, size_t{4096}, size_t{1} << 20, size_t{1} << 32}) {
        CAPTURE(c.spec, n, bytes);
        CHECK(std::string(Pick(c.kind, bytes, n, policy)) == c.expected);
      }
    }
  }
}

TEST_CASE("the measured models pick by size", "[selector][select]") {
  const AlgorithmPolicy none;
  const char* transport = GENERATE("tcp", "shm");
  const LinkModel link = DefaultLinkModel(transport);
  CAPTURE(transport);
  SECTION("small allreduce: a latency-optimal algorithm") {
    // One step of n-1 messages (direct) only on shared memory with ranks sharing cores.
    const bool direct_allowed = std::string(transport) == "shm";
    for (int n : {2, 3, 4, 5, 8, 16}) {
      for (size_t bytes : {size_t{4}, size_t{256}, size_t{1024}}) {
        CAPTURE(n, bytes);
        std::string pick = Pick(Collective::kAllReduce, bytes, n, none, link);
        CHECK((pick == "rd" || pick == "tree" || (direct_allowed && n > 2 && pick == "direct")));
      }
    }
  }
  SECTION("large allreduce: a bandwidth-optimal algorithm") {
    // Rabenseifner moves as little as the ring in fewer steps on powers of two; elsewhere its
    // folding costs two whole-buffer messages and the ring wins.
    for (int n : {3, 5, 6, 7}) {
      CAPTURE(n);
      CHECK(std::string(Pick(Collective::kAllReduce, size_t{256} << 20, n, none, link)) == "ring");
    }
    for (int n : {2, 4, 8, 16}) {
      CAPTURE(n);
      std::string pick = Pick(Collective::kAllReduce, size_t{256} << 20, n, none, link);
      CHECK((pick == "ring" || pick == "rhd"));
    }
  }
  SECTION("recursive doubling gives way as the size grows") {
    for (int n : {2, 4, 8}) {
      CAPTURE(n);
      const std::string small = Pick(Collective::kAllReduce, 8, n, none, link);
      CHECK((small == "rd" || (n > 2 && small == "direct")));
      CHECK(std::string(Pick(Collective::kAllReduce, 8 << 10, n, none, link)) != "direct");
      CHECK(std::string(Pick(Collective::kAllReduce, size_t{16} << 20, n, none, link)) != "rd");
    }
  }
  SECTION("one rank: the first registered algorithm (nothing to model)") {
    CHECK(std::string(Pick(Collective::kAllReduce, 1 << 20, 1, none, link)) ==
          NamesFor(Collective::kAllReduce).front());
  }
  SECTION("rooted collectives: priced by work; on shared cores the chain and direct never lose") {
    // The measured models are the oversubscribed ones (DefaultLinkModel's default): back-to-back
    // calls are bound by all ranks' work together. Every algorithm of a rooted collective makes
    // the same n-1 transfers; the trees add forwarding and packing, so the chain (broadcast,
    // reduce) and the direct exchange (gather, scatter) win or tie (ties go to the first
    // registered: ring, direct).
    REQUIRE(link.shared_cores);
    for (int n : {2, 3, 4, 5, 8, 16}) {
      for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{64} << 20}) {
        CAPTURE(n, bytes);
        CHECK(std::string(Pick(Collective::kBroadcast, bytes, n, none, link)) == "ring");
        CHECK(std::string(Pick(Collective::kReduce, bytes, n, none, link)) == "ring");
        CHECK(std::string(Pick(Collective::kGather, bytes, n, none, link)) == "direct");
        CHECK(std::string(Pick(Collective::kScatter, bytes, n, none, link)) == "direct");
      }
    }
  }
  SECTION("excluding the small-message winners falls back to the next best") {
    AlgorithmPolicy policy = MustParse("allreduce:^rd,tree");
    std::string pick = Pick(Collective::kAllReduce, 8, 4, policy, link);
    CHECK(pick != "rd");
    CHECK(pick != "tree");
  }
}

TEST_CASE("rooted collectives with a core per rank: the busiest rank's work", "[selector][select]") {
  const AlgorithmPolicy none;
  LinkModel link = DefaultLinkModel("shm", /*oversubscribed=*/false);
  REQUIRE_FALSE(link.shared_cores);
  const Algorithm* bcast_ring = FindAlgorithm(Collective::kBroadcast, "ring");
  const Algorithm* bcast_tree = FindAlgorithm(Collective::kBroadcast, "binomial");
  const Algorithm* reduce_ring = FindAlgorithm(Collective::kReduce, "ring");
  const Algorithm* reduce_tree = FindAlgorithm(Collective::kReduce, "binomial");
  const Algorithm* gather_direct = FindAlgorithm(Collective::kGather, "direct");
  const Algorithm* gather_tree = FindAlgorithm(Collective::kGather, "binomial");
  REQUIRE(bcast_ring != nullptr);
  REQUIRE(bcast_tree != nullptr);
  REQUIRE(reduce_ring != nullptr);
  REQUIRE(reduce_tree != nullptr);
  REQUIRE(gather_direct != nullptr);
  REQUIRE(gather_tree != nullptr);
  SECTION("hand-computed shares") {
    for (int n : {2, 3, 4, 5, 8, 16}) {
      for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{64} << 20}) {
        CAPTURE(n, bytes);
        const double b = static_cast<double>(bytes);
        // One pipelined message of the whole buffer: per-chunk overhead plus the transfer.
        const double chunks = std::max(1.0, std::ceil(b / (512 * 1024)));
        const double one = chunks * link.message_us + b / 1e3 / link.bandwidth_gbps;
        const double reduce = b / 1e3 / link.reduce_gbps;
        // A chain rank receives and forwards (only one of the two at 2 ranks); the binomial root
        // has ceil(lg n) children.
        const int chain_messages = n == 2 ? 1 : 2;
        const int root_children = n <= 2 ? 1 : n <= 4 ? 2 : n <= 8 ? 3 : 4;
        CHECK(bcast_ring->cost(link, n, bytes) == Approx(chain_messages * one));
        CHECK(bcast_tree->cost(link, n, bytes) == Approx(root_children * one));
        CHECK(reduce_ring->cost(link, n, bytes) == Approx(chain_messages * one + reduce));
        CHECK(reduce_tree->cost(link, n, bytes) == Approx(root_children * (one + reduce)));
      }
    }
  }
  SECTION("small gathers from 4 ranks: the tree's root handles ceil(lg n) messages, not n-1") {
    for (int n : {4, 8, 16}) {
      CAPTURE(n);
      CHECK(std::string(Pick(Collective::kGather, 64, n, none, link)) == "binomial");
      CHECK(std::string(Pick(Collective::kScatter, 64, n, none, link)) == "binomial");
      // Large: the tree's packing copies cost more than the messages it saves.
      CHECK(std::string(Pick(Collective::kGather, size_t{64} << 20, n, none, link)) == "direct");
    }
    // Two ranks: one message either way, and the tree also packs.
    CHECK(std::string(Pick(Collective::kGather, 64, 2, none, link)) == "direct");
    // A direct gather at 8 ranks: the root handles 7 one-block messages.
    const double block = 8 * 1024.0 / 8;
    CHECK(gather_direct->cost(link, 8, 8 * 1024) ==
          Approx(7 * (link.message_us + block / 1e3 / link.bandwidth_gbps)));
  }
}

TEST_CASE("reducing on receive: rhd's halving steps are priced at the cache rate",
          "[selector][model]") {
  const AlgorithmPolicy none;
  const size_t large = size_t{32} << 20;  // 4 ranks x 2 buffers x 32 MiB: far beyond the cache
  LinkModel link = DefaultLinkModel("shm");
  REQUIRE(link.reduces_on_receive);
  const Algorithm* rhd = FindAlgorithm(Collective::kAllReduce, "rhd");
  REQUIRE(rhd != nullptr);
  // Measured at 4 ranks over shared memory: rhd 25-33% faster than the ring at 8 and 32 MiB.
  CHECK(std::string(Pick(Collective::kAllReduce, large, 4, none, link)) == "rhd");
  // The same link without it: the separate whole-buffer pass streams from memory, ring wins.
  LinkModel copying = link;
  copying.reduces_on_receive = false;
  CHECK(std::string(Pick(Collective::kAllReduce, large, 4, none, copying)) == "ring");
  const double share = 0.75 * static_cast<double>(large);
  CHECK(rhd->cost(link, 4, large) - rhd->cost(copying, 4, large) ==
        Approx(share / 1e3 / link.reduce_gbps - share / 1e3 / link.memory_reduce_gbps));
  // With a core per rank a whole-message step streams a spilled buffer from memory all the same.
  LinkModel dedicated = DefaultLinkModel("shm", /*oversubscribed=*/false);
  REQUIRE(dedicated.reduces_on_receive);
  LinkModel dedicated_copying = dedicated;
  dedicated_copying.reduces_on_receive = false;
  CHECK(rhd->cost(dedicated, 4, large) == Approx(rhd->cost(dedicated_copying, 4, large)));
  // TCP does not reduce on receive.
  CHECK_FALSE(DefaultLinkModel("tcp").reduces_on_receive);
}

TEST_CASE("without reducing on receive, the ring hides its reduction behind its chunks",
          "[selector][model]") {
  const AlgorithmPolicy none;
  const LinkModel tcp = DefaultLinkModel("tcp");
  REQUIRE_FALSE(tcp.reduces_on_receive);
  const Algorithm* ring = FindAlgorithm(Collective::kAllReduce, "ring");
  REQUIRE(ring != nullptr);
  // 2 ranks, 4 MiB: steps of 2 MiB in four chunks, so a quarter of the reduction shows.
  const double b = 4.0 * 1024 * 1024, share = b / 2;
  LinkModel fused = tcp;
  fused.reduces_on_receive = true;
  CHECK(ring->cost(fused, 2, b) - ring->cost(tcp, 2, b) ==
        Approx(0.75 * share / 1e3 / tcp.reduce_gbps));
  // Measured over TCP (21:15): at 2 ranks the ring ahead of rhd from 2 MiB; rhd (fewer steps)
  // ahead at 512 KiB and 4 ranks.
  CHECK(std::string(Pick(Collective::kAllReduce, size_t{2} << 20, 2, none, tcp)) == "ring");
  CHECK(std::string(Pick(Collective::kAllReduce, size_t{4} << 20, 2, none, tcp)) == "ring");
  CHECK(std::string(Pick(Collective::kAllReduce, size_t{512} << 10, 4, none, tcp)) == "rhd");
  // Shared memory reduces on receive: its picks do not move (rhd at 4 ranks, 2 MiB).
  CHECK(std::string(Pick(Collective::kAllReduce, size_t{2} << 20, 4, none,
                         DefaultLinkModel("shm"))) == "rhd");
}

TEST_CASE("the choice follows the link model", "[selector][select]") {
  const AlgorithmPolicy none;
  // With free messages and a slow wire, only the bytes moved count: ring moves the least.
  LinkModel slow_wire;
  slow_wire.latency_us = 0;
  slow_wire.bandwidth_gbps = 0.001;
  std::string pick = Pick(Collective::kAllReduce, 1 << 20, 6, none, slow_wire);
  CHECK(pick == "ring");
  // With expensive steps, the fewest steps win even at 1 MiB: the direct exchange's one, then
  // recursive doubling's log2(n).
  LinkModel slow_messages;
  slow_messages.latency_us = 1e6;
  pick = Pick(Collective::kAllReduce, 1 << 20, 16, none, slow_messages);
  CHECK(pick == "direct");
  pick = Pick(Collective::kAllReduce, 1 << 20, 16, MustParse("allreduce:^direct"), slow_messages);
  CHECK(pick == "rd");
}

TEST_CASE("measured models: shared memory is the faster link, unknown transports get TCP's",
          "[selector][model]") {
  const LinkModel shm = DefaultLinkModel("shm"), tcp = DefaultLinkModel("tcp");
  CHECK(shm.latency_us < tcp.latency_us);
  CHECK(shm.bandwidth_gbps >= tcp.bandwidth_gbps);
  const LinkModel other = DefaultLinkModel("ibverbs"), none = DefaultLinkModel(nullptr);
  CHECK(other.latency_us == tcp.latency_us);
  CHECK(none.bandwidth_gbps == tcp.bandwidth_gbps);
  CHECK(LinkModel().latency_us == tcp.latency_us);
}

TEST_CASE("shared memory with a core per rank: short steps; oversubscribed: long ones",
          "[selector][model]") {
  const LinkModel dedicated = DefaultLinkModel("shm", false), shared = DefaultLinkModel("shm", true);
  CHECK(dedicated.latency_us < shared.latency_us);
  CHECK(DefaultLinkModel("tcp", false).latency_us == DefaultLinkModel("tcp", true).latency_us);
  const AlgorithmPolicy none;
  // The picks that matched the quiet selection check after reducing on receive (16:28,
  // docs/PERFORMANCE.md): 2 ranks with a core each, recursive doubling to 8 KiB, then rhd (the
  // ring makes the same two exchanges plus its pipeline set-up, 0.3-0.8 us more).
  for (size_t bytes : {size_t{8}, size_t{512}, size_t{8} << 10}) {
    CAPTURE(bytes);
    CHECK(std::string(Pick(Collective::kAllReduce, bytes, 2, none, dedicated)) == "rd");
  }
  for (size_t bytes : {size_t{32} << 10, size_t{512} << 10, size_t{2} << 20}) {
    CAPTURE(bytes);
    CHECK(std::string(Pick(Collective::kAllReduce, bytes, 2, none, dedicated)) == "rhd");
  }
  // Beyond the cache (2 ranks x 2 buffers x 8 MiB) the ring, overlapping its two halves chunk by
  // chunk, ran 3-14% ahead on a quiet machine (select_check 20:45, 21:11, 21:41).
  for (size_t bytes : {size_t{8} << 20, size_t{32} << 20}) {
    CAPTURE(bytes);
    CHECK(std::string(Pick(Collective::kAllReduce, bytes, 2, none, dedicated)) == "ring");
  }
  // 4 ranks on 2 cores: rd to 32 KiB, rhd from 128 KiB, also beyond the cache (its halving
  // steps reduce on receive).
  CHECK(std::string(Pick(Collective::kAllReduce, 32 << 10, 4, none, shared)) == "rd");
  for (size_t bytes : {size_t{128} << 10, size_t{2} << 20, size_t{8} << 20, size_t{32} << 20}) {
    CAPTURE(bytes);
    CHECK(std::string(Pick(Collective::kAllReduce, bytes, 4, none, shared)) == "rhd");
  }
}

TEST_CASE("the direct allreduce: small buffers, shared memory, ranks sharing cores",
          "[selector][model]") {
  const AlgorithmPolicy none;
  // The crossovers measured on 2 cores, 2026-11-24 (docs/ALGORITHMS.md, allreduce): 4 ranks,
  // direct ahead to 128 B (3.7 against rd's 4.3 us), within 7% at 512 B-2 KiB, behind from 8 KiB;
  // 3, 5 and 6 ranks ahead to 4 KiB or more.
  const LinkModel four_on_two = DefaultLinkModel("shm", true, 2.0);
  for (size_t bytes : {size_t{8}, size_t{128}, size_t{512}}) {
    CAPTURE(bytes);
    CHECK(std::string(Pick(Collective::kAllReduce, bytes, 4, none, four_on_two)) == "direct");
  }
  for (size_t bytes : {size_t{2} << 10, size_t{8} << 10}) {
    CAPTURE(bytes);
    CHECK(std::string(Pick(Collective::kAllReduce, bytes, 4, none, four_on_two)) == "rd");
  }
  CHECK(std::string(Pick(Collective::kAllReduce, 8, 3, none, DefaultLinkModel("shm", true, 1.5))) ==
        "direct");
  CHECK(std::string(Pick(Collective::kAllReduce, 8, 5, none, DefaultLinkModel("shm", true, 2.5))) ==
        "direct");
  CHECK(std::string(Pick(Collective::kAllReduce, 8, 6, none, DefaultLinkModel("shm", true, 3.0))) ==
        "direct");
  // The more ranks share a core, the more its n-1 sends cost: 16 ranks on 2 cores take rd.
  CHECK(std::string(Pick(Collective::kAllReduce, 8, 16, none, DefaultLinkModel("shm", true, 8.0))) ==
        "rd");
  // At 2 ranks it is rd's one exchange: rd keeps the tie. With a core per rank, and over TCP
  // (3 ranks: 33 against 23 us at 8 B; 4 ranks 51-60 against 37-43), rd.
  CHECK(std::string(Pick(Collective::kAllReduce, 8, 2, none, DefaultLinkModel("shm", false))) == "rd");
  CHECK(std::string(Pick(Collective::kAllReduce, 8, 4, none, DefaultLinkModel("shm", false))) == "rd");
  for (int n : {3, 4, 5, 8}) {
    CAPTURE(n);
    const LinkModel tcp = DefaultLinkModel("tcp", true, n / 2.0);
    CHECK(std::string(Pick(Collective::kAllReduce, 8, n, none, tcp)) != "direct");
    CHECK(std::string(Pick(Collective::kAllReduce, 8, n, none, DefaultLinkModel("tcp", false))) !=
          "direct");
  }
}

TEST_CASE("every cost function is finite, non-negative and grows with size", "[selector][cost]") {
  const LinkModel link;
  for (const Algorithm& a : Algorithms()) {
    if (a.cost == nullptr) continue;
    for (int n : {1, 2, 3, 4, 5, 7, 8, 16, 100}) {
      double previous = -1;
      for (size_t bytes = 0; bytes <= (size_t{1} << 34); bytes = bytes == 0 ? 1 : bytes * 4) {
        CAPTURE(a.name, CollectiveName(a.kind), n, bytes);
        const double cost = a.cost(link, n, bytes);
        CHECK(cost >= 0);
        CHECK(cost < 1e15);
        CHECK(cost >= previous);
        previous = cost;
      }
    }
  }
}

TEST_CASE("a bad BRAID_ALGO fails communicator creation, naming it", "[env]") {
  const char* spec = std::getenv("BRAID_ALGO");
  REQUIRE(spec != nullptr);  // set by the BUILD rule
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  braidComm_t comm = nullptr;
  CHECK(braidCommInitRank(&comm, 1, id, 0) == braidInvalidArgument);
  const std::string error = braidGetLastError(nullptr);
  CAPTURE(error);
  CHECK(error.find("BRAID_ALGO") != std::string::npos);
  CHECK(error.find("nosuch") != std::string::npos);
}


TEST_CASE("the cached selector answers what the selector would, call after call", "[selector]") {
  // A sequence that repeats arguments (served from the cache) and changes each of them in turn
  // (count, type, op, root, collective), checked against a fresh SelectAlgorithm every time.
  const LinkModel link = DefaultLinkModel("shm");
  const AlgorithmPolicy policy = MustParse(GENERATE(std::string(""), std::string("allreduce:^rd")));
  const int n = GENERATE(2, 4, 5);
  TrialOptions no_trials;
  no_trials.enabled = false;
  CachedSelector cached(n, policy, link, no_trials);
  struct Call {
    Collective kind;
    size_t count;
    DataType type;
    ReduceOp op;
    int root;
  };
  const std::vector<Call> calls = {
      {Collective::kAllReduce, 2, DataType::kFloat32, ReduceOp::kSum, 0},
      {Collective::kAllReduce, 2, DataType::kFloat32, ReduceOp::kSum, 0},
      {Collective::kAllReduce, 4 << 20, DataType::kFloat32, ReduceOp::kSum, 0},
      {Collective::kAllReduce, 2, DataType::kFloat32, ReduceOp::kSum, 0},
      {Collective::kAllReduce, 2, DataType::kFloat64, ReduceOp::kSum, 0},
      {Collective::kAllReduce, 2, DataType::kFloat64, ReduceOp::kMax, 0},
      {Collective::kBroadcast, 1 << 10, DataType::kFloat32, ReduceOp::kSum, 1},
      {Collective::kAllReduce, 2, DataType::kFloat64, ReduceOp::kMax, 0},
      {Collective::kGather, 1 << 10, DataType::kInt8, ReduceOp::kSum, 1},
      {Collective::kGather, 1 << 10, DataType::kInt8, ReduceOp::kSum, 0},
      {Collective::kAllReduce, 1 << 20, DataType::kInt8, ReduceOp::kSum, 0},
      {Collective::kAllReduce, 1 << 20, DataType::kFloat64, ReduceOp::kSum, 0},
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    CAPTURE(n, i);
    CollectiveArgs args;
    args.kind = calls[i].kind;
    args.count = calls[i].count;
    args.type = calls[i].type;
    args.op = calls[i].op;
    args.root = calls[i].root;
    Result<const Algorithm*> want = SelectAlgorithm(args, n, policy, link);
    Result<AlgorithmTrials::Plan> got = cached.Select(args);
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    CHECK(std::string(got.value().algorithm->name) == want.value()->name);
    CHECK(got.value().algorithm->kind == args.kind);
    CHECK(got.value().trial == nullptr);
  }
}

TEST_CASE("the cached selector runs a near-tie's trial, then serves its winner", "[selector]") {
  // Broadcast with ranks sharing cores: the chain ("ring") and the binomial tree do the same
  // total work, so the model ties them at every size.
  const LinkModel link = DefaultLinkModel("shm");
  CollectiveArgs args;
  args.kind = Collective::kBroadcast;
  args.count = 2048;
  Result<Ranking> ranking = RankAlgorithms(args, 4, AlgorithmPolicy(), link);
  REQUIRE(ranking.ok());
  REQUIRE(ranking.value().runner_up != nullptr);
  REQUIRE(ranking.value().runner_up_cost <= ranking.value().best_cost * (1 + 1e-9));

  TrialOptions options;
  options.first_block_calls = 3;
  options.target_block_us = 0;  // one round decides
  CachedSelector cached(4, AlgorithmPolicy(), link, options);
  CollectiveArgs other = args;
  other.kind = Collective::kAllReduce;  // interleaved, must not disturb the trial
  std::vector<std::string> ran;
  std::optional<std::array<double, 2>> totals;
  AlgorithmTrials::Trial* trial = nullptr;
  for (int call = 0; call < 12; ++call) {
    Result<AlgorithmTrials::Plan> plan = cached.Select(args);
    REQUIRE(plan.ok());
    REQUIRE(plan.value().trial != nullptr);
    trial = plan.value().trial;
    ran.push_back(plan.value().algorithm->name);
    REQUIRE(cached.Select(other).ok());
    CHECK_FALSE(totals.has_value());
    // The runner-up takes 1 us and the model's pick 3, so the runner-up must win.
    totals = cached.RecordTrial(trial, ran.back() == ranking.value().best->name ? 3.0 : 1.0);
  }
  const std::string a = ranking.value().best->name, b = ranking.value().runner_up->name;
  CHECK(ran == std::vector<std::string>{a, a, a, b, b, b, b, b, b, a, a, a});
  REQUIRE(totals.has_value());
  CHECK(totals.value() == std::array<double, 2>{4 * 3.0, 4 * 1.0});
  const AlgorithmTrials::Verdict verdict = cached.ConcludeTrial(trial, {48.0, 16.0});
  REQUIRE(verdict.winner != nullptr);
  CHECK(std::string(verdict.winner->name) == b);
  for (int call = 0; call < 3; ++call) {
    Result<AlgorithmTrials::Plan> plan = cached.Select(args);
    REQUIRE(plan.ok());
    CHECK(plan.value().trial == nullptr);
    CHECK(std::string(plan.value().algorithm->name) == b);
  }
}

}  // namespace braid::algorithms
