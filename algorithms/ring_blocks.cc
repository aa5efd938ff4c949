#include "algorithms/ring_blocks.h"

#include <algorithm>
#include <cstring>

#include "algorithms/primitives.h"

namespace braid::algorithms {
namespace {

// The most slices any block is cut into.
size_t MostSlices(const Primitives& prims, const std::vector<std::vector<Block>>& sets) {
  size_t most = 0;
  for (const std::vector<Block>& set : sets) {
    for (const Block& block : set) most = std::max(most, prims.SliceCount(block.count));
  }
  return most;
}

}  // namespace

Status RingReduceScatterBlocks(const CollectiveContext& ctx, const CollectiveArgs& args,
                               const char* algorithm, const void* in,
                               const std::vector<std::vector<Block>>& sets, void* out,
                               const std::vector<Block>& own_out) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t elem = DataTypeSize(args.type);
  const char* input = static_cast<const char*>(in);
  char* output = static_cast<char*>(out);
  const std::vector<Block>& own = sets[rank];
  if (n == 1) {
    for (size_t i = 0; i < own.size(); ++i) {
      const char* from = input + own[i].offset * elem;
      char* to = output + own_out[i].offset * elem;
      if (from != to) std::memmove(to, from, own[i].count * elem);
    }
    return Status::Ok();
  }
  auto set = [&](int j) -> const std::vector<Block>& { return sets[((j % n) + n) % n]; };

  Primitives prims(ctx, args, algorithm);
  BRAID_RETURN_IF_ERROR(prims.Connect((rank - 1 + n) % n, (rank + 1) % n));
  // Slice s of block b, as a span of the whole buffer.
  auto slice = [&](const Block& b, size_t s) {
    Span span = prims.Slice(b.count, s);
    span.offset += b.offset;
    return span;
  };
  const size_t slices = MostSlices(prims, sets);
  for (size_t s = 0; s < slices && prims.ok(); ++s) {
    for (size_t i = 0; i < own.size(); ++i) {
      prims.Send(in, slice(set(rank - 1)[i], s));
      for (int k = 2; k < n; ++k) prims.RecvReduceSend(in, slice(set(rank - k)[i], s));
      // The complete block lands at its own output position: the move's span indexes both
      // buffers alike, so each is based at its block.
      prims.RecvReduce(output + own_out[i].offset * elem, input + own[i].offset * elem,
                       prims.Slice(own[i].count, s));
    }
  }
  return prims.Finish();
}

Status RingAllGatherBlocks(const CollectiveContext& ctx, const CollectiveArgs& args,
                           const char* algorithm, void* buf,
                           const std::vector<std::vector<Block>>& sets) {
  const int n = ctx.size, rank = ctx.rank;
  if (n == 1) return Status::Ok();
  auto set = [&](int j) -> const std::vector<Block>& { return sets[((j % n) + n) % n]; };

  Primitives prims(ctx, args, algorithm);
  BRAID_RETURN_IF_ERROR(prims.Connect((rank - 1 + n) % n, (rank + 1) % n));
  auto slice = [&](const Block& b, size_t s) {
    Span span = prims.Slice(b.count, s);
    span.offset += b.offset;
    return span;
  };
  const size_t slices = MostSlices(prims, sets);
  for (size_t s = 0; s < slices && prims.ok(); ++s) {
    for (size_t i = 0; i < sets[rank].size(); ++i) {
      prims.Send(buf, slice(set(rank)[i], s));
      for (int k = 1; k < n - 1; ++k) prims.RecvCopySend(buf, slice(set(rank - k)[i], s));
      prims.Recv(buf, slice(set(rank - (n - 1))[i], s));
    }
  }
  return prims.Finish();
}

}  // namespace braid::algorithms
