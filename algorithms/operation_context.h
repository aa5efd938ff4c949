// The one formatter for the operation an error interrupted. Every algorithm puts it in front of
// its failures, so a user reads the same words whichever algorithm ran:
//
//   rank 2: reduce #17 (1021 x float, sum, root 0, ring): receiving message 3 from rank 1
//   rank 0: alltoall #4 (64 x int32 per peer, pairwise): sending to rank 3
//   rank 1: gather #9 (8 x double per rank, root 0, binomial): receiving from rank 3
//   rank 3: barrier #2 (dissemination): round 1, waiting for rank 1
//
// The op appears for the reducing collectives, the root for the rooted ones; alltoall's count is
// "per peer", gather's and scatter's "per rank"; a barrier names no count. The sequence number is
// CollectiveContext::sequence as the messages' tags carry it.
//
// Cost: these build strings, so they are for the failure path only (out of line, marked cold);
// no algorithm calls them on success.
#pragma once

#include <string>

#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// "rank 2: reduce #17 (1021 x float, sum, root 0, ring)"; `algorithm` as the registry names it
// or more precisely ("recursive doubling").
[[gnu::cold]] std::string OperationContext(const CollectiveContext& ctx, const CollectiveArgs& args,
                                           const char* algorithm);

// `status` with OperationContext in front: "rank 2: allreduce #5 (...): <status's message>".
[[gnu::cold]] Status WithOperationContext(const Status& status, const CollectiveContext& ctx,
                                          const CollectiveArgs& args, const char* algorithm);

// The same, naming the peer and what this rank was doing with it: "<context>: <doing> rank <peer>"
// ("sending to", "receiving from"), then the status's message.
[[gnu::cold]] Status WithOperationContext(const Status& status, const CollectiveContext& ctx,
                                          const CollectiveArgs& args, const char* algorithm,
                                          const char* doing, int peer);

}  // namespace braid::algorithms
