// Ring reduce-scatter.
//
// Why a ring: each rank must end with the reduction of one block over all ranks; on a ring each
// block's partial sum travels n-1 hops, gaining one contribution per hop, so every rank sends and
// receives (n-1)/n of the buffer and reduces as much, the least any reduce-scatter moves, with
// every link busy at every step. The price is n-1 message latencies.
//
// Shape (block b of sendbuf is rank b's share of the result, `count` elements): the partial for
// block b starts at rank b+1 and ends, complete, at rank b. At step 0 a rank sends its own
// contribution to block rank-1; at step k = 1 .. n-2 it receives the partial for block rank-k-1,
// adds its contribution and forwards it; at step n-1 it receives the partial for its own block,
// adds its contribution and writes the result to recvbuf. kAvg divides each complete slice by
// ctx.size once, as it is written (primitives.h).
//
// Pipelining: every block is cut into chunk-sized slices and the n-1 steps run slice by slice, so
// a rank reduces slice s while slice s+1 arrives; partial sums live in the primitives' scratch
// slots, so sendbuf is never written and recvbuf only at the last step.
//
// In place (recvbuf == sendbuf + rank*count): the last step reads and writes the same elements,
// which the reduction kernel allows, and no earlier step reads this rank's own block.
#include "algorithms/reduce_scatter_ring.h"

#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/primitives.h"

namespace braid::algorithms {

Status RingReduceScatter(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t count = args.count, block_bytes = count * DataTypeSize(args.type);
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(args.sendbuf);
  char* out = static_cast<char*>(args.recvbuf);
  auto block = [&](int b) { return in + static_cast<size_t>((b % n + n) % n) * block_bytes; };
  if (n == 1) {
    if (out != in) std::memcpy(out, in, block_bytes);  // an average over one rank is the value
    return Status::Ok();
  }

  Primitives prims(ctx, args, "ring");
  BRAID_RETURN_IF_ERROR(prims.Connect((rank - 1 + n) % n, (rank + 1) % n));
  for (size_t s = 0; s < prims.SliceCount(count) && prims.ok(); ++s) {
    const Span slice = prims.Slice(count, s);
    prims.Send(block(rank - 1), slice);
    for (int k = 2; k < n; ++k) prims.RecvReduceSend(block(rank - k), slice);
    prims.RecvReduce(out, block(rank), slice);
  }
  return prims.Finish();
}

double RingReduceScatterCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double share = static_cast<double>(n - 1) / n * static_cast<double>(bytes);
  return (n - 1) * link.latency_us + cost::Transfer(link, share) + cost::Reduce(link, share);
}

}  // namespace braid::algorithms
