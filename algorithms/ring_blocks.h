// Ring reduce-scatter and all-gather over sets of blocks anywhere in a buffer: the intra-host and
// cross-host phases of the two-level algorithms (algorithms/hierarchical.h).
//
// Why not the registered ring reduce-scatter and all-gather: those take one block per rank,
// equal in length and laid out in rank order. A two-level phase needs each rank of its group to
// own several blocks (every host's share of one local rank), of unequal length (a buffer that
// does not divide evenly), at the positions the communicator's rank order gives them, which a
// group's rank order does not match when hosts interleave their ranks.
//
// Shape: the ring's, block by block. `sets[j]` lists rank j's blocks; every set has the same
// number of blocks K, and block i of set j has the same length on every rank. Block i of every
// set moves through the ring as the registered algorithms move their one block, and each block is
// cut in chunk-sized slices; the moves are issued slice by slice and, within a slice, block by
// block, so every (slice, block) pair is one ordinary ring pass and a rank sends at most one
// message ahead of what it received, as the primitives' bounded scratch requires
// (primitives.h). Empty slices are dropped on both ends alike.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

// Elements [offset, offset + count) of a buffer.
struct Block {
  size_t offset = 0;
  size_t count = 0;
};

// For every i, out[own_out[i]] = op over the ring's ranks of in[sets[ctx.rank][i]]: rank j ends
// with the reduction of its own blocks. `args` gives the type and op (kAvg divides by ctx.size
// where each block completes) and names the collective in errors as `algorithm`. `in` is only
// read; out may be `in` with own_out == sets[ctx.rank] (in place).
Status RingReduceScatterBlocks(const CollectiveContext& ctx, const CollectiveArgs& args,
                               const char* algorithm, const void* in,
                               const std::vector<std::vector<Block>>& sets, void* out,
                               const std::vector<Block>& own_out);

// Every rank's blocks, already in `buf` at their positions on their owner (sets[j] on rank j),
// end in `buf` on every rank. Only blocks of other ranks are written.
Status RingAllGatherBlocks(const CollectiveContext& ctx, const CollectiveArgs& args,
                           const char* algorithm, void* buf,
                           const std::vector<std::vector<Block>>& sets);

}  // namespace braid::algorithms
