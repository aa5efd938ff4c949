// Chain broadcast (registered as broadcast "ring").
//
// Why a pipelined chain: the ranks form the chain root -> root+1 -> ... -> root-1 and the buffer
// flows down it in chunks, each rank forwarding chunk c while chunk c+1 arrives. Every rank
// receives the buffer once and sends it at most once, so on large buffers every link runs at
// bandwidth and the time is about B/β plus one chunk per hop to fill the pipe, independent of the
// rank count; a binomial tree instead makes the root send the whole buffer log2(n) times. Small
// buffers pay n-1 latencies here, which is what the tree family is for.
//
// Pipelining: the buffer is cut into chunk-sized slices; the primitives post receives ahead and
// forward each slice as soon as it has landed (primitives.h).
//
// Why it is safe to receive straight into recvbuf: a non-root's recvbuf holds nothing it needs,
// and a slice is forwarded from recvbuf only after it landed there. Non-roots never read sendbuf.
// Out of place, the root sends from sendbuf and copies it into recvbuf while the chain streams.
#include "algorithms/broadcast_chain.h"

#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/primitives.h"

namespace braid::algorithms {

Status ChainBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t count = args.count;
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(args.sendbuf);
  char* out = static_cast<char*>(args.recvbuf);
  const bool is_root = rank == args.root;
  if (n == 1) {
    if (out != in) std::memcpy(out, in, count * DataTypeSize(args.type));
    return Status::Ok();
  }

  // Position in the chain: the root is 0, the last rank n-1.
  const int position = (rank - args.root + n) % n;
  const int prev = position > 0 ? (rank - 1 + n) % n : -1;
  const int next = position < n - 1 ? (rank + 1) % n : -1;
  Primitives prims(ctx, args, "ring");
  BRAID_RETURN_IF_ERROR(prims.Connect(prev, next));
  for (size_t s = 0; s < prims.SliceCount(count) && prims.ok(); ++s) {
    const Span slice = prims.Slice(count, s);
    if (is_root) {
      prims.Send(in, slice);
    } else if (next >= 0) {
      prims.RecvCopySend(out, slice);
    } else {
      prims.Recv(out, slice);
    }
  }
  if (is_root && out != in) std::memcpy(out, in, count * DataTypeSize(args.type));
  return prims.Finish();
}

// Priced by work, not by the path's n-1 latencies (cost::RootedCall says why): a rank inside the
// chain receives and forwards the whole buffer (at 2 ranks each only sends or receives it); all
// ranks together make n-1 transfers, each a send and a receive.
double ChainBroadcastCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  return cost::RootedCall(link, cost::RankShare(link, n == 2 ? 1 : 2, b),
                          cost::RankShare(link, 2 * (n - 1), b));
}

}  // namespace braid::algorithms
