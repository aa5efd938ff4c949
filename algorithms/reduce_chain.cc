// Chain reduce (registered as reduce "ring").
//
// Why a pipelined chain: the ranks form the chain root+1 -> root+2 -> ... -> root-1 -> root and
// a running partial flows down it in chunks: the first rank sends its contribution, every later
// rank receives the partial, adds its own contribution and forwards it, and the root adds its own
// and writes recvbuf. Every rank receives and sends the buffer at most once and reduces it once,
// so on large buffers every link runs at bandwidth and the time is about B/β + B/γ plus one chunk
// per hop, independent of the rank count; a binomial tree makes the root receive and reduce the
// whole buffer log2(n) times. Small buffers pay n-1 latencies here (tree family territory).
//
// Pipelining: the buffer is cut into chunk-sized slices; each rank reduces slice c while slice c+1
// arrives. Partials live in the primitives' scratch slots: a non-root's recvbuf may be NULL and is
// never touched, and no sendbuf is ever written. kAvg divides each complete slice at the root by
// ctx.size once, as it is written (primitives.h).
//
// In place at the root (recvbuf == sendbuf): each slice is read and written by the same move,
// which the reduction kernel allows.
#include "algorithms/reduce_chain.h"

#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/primitives.h"

namespace braid::algorithms {

Status ChainReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t count = args.count;
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(args.sendbuf);
  char* out = static_cast<char*>(args.recvbuf);
  if (n == 1) {
    if (out != in) std::memcpy(out, in, count * DataTypeSize(args.type));  // avg of one = value
    return Status::Ok();
  }

  // Position in the chain: the rank after the root is 0, the root n-1.
  const int position = (rank - args.root - 1 + 2 * n) % n;
  const int prev = position > 0 ? (rank - 1 + n) % n : -1;
  const int next = position < n - 1 ? (rank + 1) % n : -1;
  Primitives prims(ctx, args, "ring");
  BRAID_RETURN_IF_ERROR(prims.Connect(prev, next));
  for (size_t s = 0; s < prims.SliceCount(count) && prims.ok(); ++s) {
    const Span slice = prims.Slice(count, s);
    if (prev < 0) {
      prims.Send(in, slice);
    } else if (next >= 0) {
      prims.RecvReduceSend(in, slice);
    } else {
      prims.RecvReduce(out, in, slice);
    }
  }
  return prims.Finish();
}

// Priced by work, not by the path's n-1 latencies (cost::RootedCall says why): a rank inside the
// chain receives the partial, reduces it once and forwards it (at 2 ranks the root only receives
// and reduces); all ranks together make n-1 transfers and n-1 reductions.
double ChainReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  return cost::RootedCall(link, cost::RankShare(link, n == 2 ? 1 : 2, b) + cost::Reduce(link, b),
                          cost::RankShare(link, 2 * (n - 1), b) + (n - 1) * cost::Reduce(link, b));
}

}  // namespace braid::algorithms
