// One rank of a multi-host job (tests/multihost/multihost_test.sh starts it with braidrun in
// every namespace host): every collective, through braid.h over env://, checked against the
// serial oracles of tests/collectives (exact small-integer reductions, data-movement values that
// name source, destination and index), once with the cost model's choice and once with each
// algorithm family forced (BRAID_ALGO's syntax through braidConfig_t::algo), so the two-level
// algorithms and the flat ring, tree, recursive doubling, halving-doubling, direct and binomial
// all cross the hosts' links. Then a
// point-to-point ring. Exits 0 only when every rank saw every call right, and prints one line
// per rank: "multihost_check: rank R of N: K calls checked, F wrong".
#include <cstdio>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/collectives/collective_checks.h"

namespace {

using braid::testing::Call;
using braid::testing::Coll;

constexpr Coll kCollectives[] = {Coll::kAllReduce, Coll::kBroadcast,     Coll::kReduce,
                                 Coll::kAllGather, Coll::kReduceScatter, Coll::kAllToAll,
                                 Coll::kGather,    Coll::kScatter};
// Counts that leave segments empty (1 with 8 ranks), uneven (37, 4099), and 300000 floats
// (1.2 MB), past one 512 KiB pipelined chunk wherever a whole buffer or a per-rank block travels
// as one message (chain broadcast and reduce, ring all-gather's blocks), so chunking crosses
// the hosts too.
constexpr size_t kCounts[] = {1, 37, 4099, 300000};
// "" = the cost model's choice (two-level across hosts for most calls); the others force one
// family wherever a collective has it.
// "hier" forces the two-level algorithms (algorithms/hierarchical.h) where a collective has them.
const char* const kAlgorithms[] = {"", "hier", "ring", "tree", "rd", "rhd", "direct", "binomial"};

// The calls of one communicator: every collective and count, out of place and in place, sum
// and max where it reduces, the last rank as root where it has one; int32 at one count.
std::vector<Call> CallsFor(int size) {
  std::vector<Call> calls;
  for (Coll coll : kCollectives) {
    for (size_t count : kCounts) {
      for (bool in_place : {false, true}) {
        for (braidRedOp_t op : {braidSum, braidMax}) {
          if (op != braidSum && !braid::testing::Reduces(coll)) continue;
          Call call;
          call.coll = coll;
          call.count = count;
          call.in_place = in_place;
          call.op = op;
          call.root = size - 1;
          calls.push_back(call);
        }
      }
    }
    Call int_call;
    int_call.coll = coll;
    int_call.type = braidInt32;
    int_call.count = 4099;
    calls.push_back(int_call);
  }
  return calls;
}

// Each rank sends its rank number (and a marker) to the next and receives from the previous.
std::string PointToPointRing(braidComm_t comm, int rank, int size) {
  if (size < 2) return "";
  int64_t out[2] = {rank, 0x5eed}, in[2] = {-1, -1};
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (braidGroupStart() != braidSuccess ||
      braidSend(out, 2, braidInt64, next, comm, nullptr) != braidSuccess ||
      braidRecv(in, 2, braidInt64, prev, comm, nullptr) != braidSuccess ||
      braidGroupEnd() != braidSuccess) {
    return std::string("send/recv ring failed: ") + braidGetLastError(comm);
  }
  if (in[0] != prev || in[1] != 0x5eed) {
    return "send/recv ring: got (" + std::to_string(in[0]) + ", " + std::to_string(in[1]) +
           ") from rank " + std::to_string(prev);
  }
  return "";
}

}  // namespace

int main() {
  int checked = 0, wrong = 0, rank = -1, size = 0;
  for (const char* algo : kAlgorithms) {
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.algo = algo;
    braidComm_t comm = nullptr;
    if (braidCommInitEnv(&comm, &config) != braidSuccess) {
      std::fprintf(stderr, "multihost_check: braidCommInitEnv (algo '%s') failed: %s\n", algo,
                   braidGetLastError(nullptr));
      return 1;
    }
    braidCommUserRank(comm, &rank);
    braidCommCount(comm, &size);
    for (const Call& call : CallsFor(size)) {
      const std::string failure = braid::testing::RunAndCheck(comm, rank, size, call);
      ++checked;
      if (!failure.empty()) {
        ++wrong;
        std::fprintf(stderr, "multihost_check: rank %d, algo '%s': %s\n", rank, algo,
                     failure.c_str());
      }
    }
    const std::string p2p = PointToPointRing(comm, rank, size);
    ++checked;
    if (!p2p.empty()) {
      ++wrong;
      std::fprintf(stderr, "multihost_check: rank %d, algo '%s': %s\n", rank, algo, p2p.c_str());
    }
    // Every rank learns whether any rank saw a wrong result, so all exit alike.
    int64_t wrong_anywhere = wrong;
    if (braidAllReduce(&wrong_anywhere, &wrong_anywhere, 1, braidInt64, braidSum, comm, nullptr) !=
        braidSuccess) {
      std::fprintf(stderr, "multihost_check: rank %d: summing the failures failed: %s\n", rank,
                   braidGetLastError(comm));
      return 1;
    }
    braidCommDestroy(comm);
    if (wrong_anywhere > 0 && wrong == 0) wrong = -1;  // another rank's calls went wrong
    if (wrong != 0) break;
  }
  std::printf("multihost_check: rank %d of %d: %d calls checked, %d wrong%s\n", rank, size,
              checked, wrong < 0 ? 0 : wrong, wrong < 0 ? " here (another rank saw some)" : "");
  return wrong == 0 ? 0 : 1;
}
