// The read family ("read" in BRAID_ALGO): all-gather, broadcast, all-to-all, gather and scatter
// as one round of
// single-copy reads (algorithms/peer_reads.h), each rank copying the blocks it lacks straight out
// of their owners' buffers. Each algorithm's file has its "why" block; cost_model.h's
// PeerReadRound prices them, infinite unless this machine's calibration measured one copy
// faster, so the selector picks them only there and BRAID_ALGO=<collective>:read forces them.
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// Every rank reads every peer's sendbuf (count elements) into its block of recvbuf; in place
// when sendbuf is the rank's own block of recvbuf.
Status ReadAllGather(const CollectiveContext& ctx, const CollectiveArgs& args);
double ReadAllGatherCost(const LinkModel& link, int n, size_t bytes);

// Every non-root reads the root's sendbuf into its recvbuf.
Status ReadBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args);
double ReadBroadcastCost(const LinkModel& link, int n, size_t bytes);

// Every rank reads block `rank` of every peer's sendbuf into block `peer` of its recvbuf; in
// place (sendbuf == recvbuf) into scratch first, copied into place after the round.
Status ReadAllToAll(const CollectiveContext& ctx, const CollectiveArgs& args);
double ReadAllToAllCost(const LinkModel& link, int n, size_t bytes);

// The root reads every other rank's sendbuf into its block of recvbuf (in place when the root's
// sendbuf is its own block of recvbuf).
Status ReadGather(const CollectiveContext& ctx, const CollectiveArgs& args);
double ReadGatherCost(const LinkModel& link, int n, size_t bytes);

// Every non-root reads its block of the root's sendbuf into recvbuf (in place when the root's
// recvbuf is its own block of sendbuf).
Status ReadScatter(const CollectiveContext& ctx, const CollectiveArgs& args);
double ReadScatterCost(const LinkModel& link, int n, size_t bytes);

}  // namespace braid::algorithms
