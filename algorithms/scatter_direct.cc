// Direct scatter.
//
// Why direct: the root must push (n-1) blocks through its own link whatever the shape, so for
// large blocks the fastest scatter keeps that link busy from the start: the root posts all n-1
// sends at once, each straight from its block of sendbuf, and every other rank receives its block
// straight into recvbuf in one message. Nothing is forwarded, copied twice or staged in scratch.
// The price is latency that grows with n at the root — for small blocks the binomial tree
// (scatter_binomial.cc) is cheaper.
//
// Written as one FanRound (fan_primitives.h): the root posts a Send per peer from its block,
// every other rank one Recv, and all wait.
// Tags: the only message of each pair is number 0.
#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"
#include "algorithms/scatter.h"

namespace braid::algorithms {

Status DirectScatter(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t count = args.count;
  const size_t block = count * DataTypeSize(args.type);
  const int n = ctx.size;
  const int root = args.root;
  if (count == 0) return Status::Ok();
  FanRound round(ctx, args, "direct");
  if (ctx.rank != root) {
    round.Recv(root, 0, args.recvbuf, Span{0, count});
    return round.Wait();
  }
  const char* in = static_cast<const char*>(args.sendbuf);
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) round.Send(peer, 0, in, Span{static_cast<size_t>(peer) * count, count});
  }
  // In place, the root's block already sits at its offset.
  if (args.recvbuf != in + root * block) std::memmove(args.recvbuf, in + root * block, block);
  return round.Wait();
}

// Priced by work (cost::RootedCall says why not the root's n-1 message steps): see
// cost::DirectBlocksCost.
double DirectScatterCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::DirectBlocksCost(link, n, static_cast<double>(bytes));
}

}  // namespace braid::algorithms
