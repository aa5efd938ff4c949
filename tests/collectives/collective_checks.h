// One call of any collective through braid.h, checked against the serial oracles of
// tests/collectives/reference.h; the sweeps (sweep_test.cc) run it over the whole matrix.
//
// What every check asserts beyond the result's values: out of place, sendbuff comes back
// unchanged; nothing is written past the end of any buffer (one guard byte each); a buffer NCCL
// says a rank does not use is passed as NULL for some calls and, when passed, left untouched; in
// place uses NCCL's offsets (AllGather, Gather: sendbuff = recvbuff + rank·count; ReduceScatter,
// Scatter: recvbuff = sendbuff + rank·count).
//
// Oracles: reductions use reference.h's exact small-integer inputs, folded serially in rank
// order (ExpectedValue); data movement (broadcast, allgather, all-to-all, gather, scatter) uses
// values that encode (source, destination, index), so a block from the wrong rank or at the wrong
// offset is caught.
#pragma once

#include <cstddef>
#include <string>

#include "bindings/c/braid.h"

namespace braid::testing {

enum class Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kGather,
  kScatter,
};

// As BRAID_ALGO spells the collective: "allreduce", "reducescatter", ...
const char* CollName(Coll coll);
// Whether the call takes an op / a root.
bool Reduces(Coll coll);
bool Rooted(Coll coll);

struct Call {
  Coll coll = Coll::kAllReduce;
  braidDataType_t type = braidFloat32;
  braidRedOp_t op = braidSum;  // ignored where !Reduces(coll)
  size_t count = 0;            // braid.h's count argument (per rank or per peer, as the call says)
  bool in_place = false;
  int root = 0;                // ignored where !Rooted(coll)
};

// "reduce int8 max count 7 in place root 2"
std::string Describe(const Call& call);

// Runs `call` on this rank of `comm` (`size` ranks, every rank calling with the same Call) and
// checks what this rank can see. "" or Describe(call) + what went wrong.
std::string RunAndCheck(braidComm_t comm, int rank, int size, const Call& call);

}  // namespace braid::testing
