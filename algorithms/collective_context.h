// What an algorithm needs to run one collective: who it is, how to reach its neighbours, the
// deadline, and reusable scratch memory. Algorithms see Connections only, never a transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/function_ref.h"
#include "algorithms/host_topology.h"
#include "algorithms/tag_layout.h"
#include "core/base/deadline.h"
#include "core/base/status.h"
#include "transport/connection.h"

namespace braid::algorithms {

// How an algorithm reaches a peer: lookup(peer) returns the connection, made on first use by
// `connect`. Links made before are read from `made` (indexed by rank, null where none yet) with
// no call: a small collective looks its peer up on every step, and the call through `connect`
// with its Result was 4% of a 2-rank 8-byte allreduce's instructions.
struct ConnectionLookup {
  transport::Connection* const* made = nullptr;
  FunctionRef<Result<transport::Connection*>(int peer)> connect;

  Result<transport::Connection*> operator()(int peer) const {
    if (made != nullptr && made[peer] != nullptr) return made[peer];
    return connect(peer);
  }
};

struct CollectiveContext {
  int rank = 0;
  int size = 1;
  // Per-communicator sequence number of this collective, with its tag space on top
  // (OperationSequence, algorithms/tag_layout.h); folded into every message tag (MessageTag) so
  // that ranks disagreeing about the schedule fail with a tag mismatch instead of mixing data.
  uint64_t sequence = 0;
  // Bytes per pipelined chunk (BRAID_CHUNK_BYTES).
  size_t chunk_bytes = 512 * 1024;
  Deadline deadline = Deadline::Never();
  // Returns the connection to `peer`, establishing it on first use.
  ConnectionLookup connection;
  // Returns at least `bytes` of scratch memory owned by the communicator (valid until the next
  // call, never shared between concurrent collectives).
  FunctionRef<void*(size_t bytes)> scratch;
  // Which ranks share a host (owned by the communicator, the same on every rank); null where the
  // caller models one host (tests that build a context by hand).
  const HostTopology* topology = nullptr;
  // The communicator's rank of each rank of this context, where the context is a subgroup's
  // (algorithms/subgroup.h: a two-level algorithm runs flat ones inside a host or across hosts),
  // so that errors name the ranks a user knows; null where the context's ranks are the
  // communicator's.
  const int* ranks = nullptr;
};

// The communicator's number of `rank` of `ctx` (for messages).
inline int CommunicatorRank(const CollectiveContext& ctx, int rank) {
  return ctx.ranks != nullptr && rank >= 0 ? ctx.ranks[rank] : rank;
}

}  // namespace braid::algorithms
