// Direct gather.
//
// Why direct: the root must take in (n-1) blocks through its own link whatever the shape, so for
// large blocks the fastest gather is the one that keeps that link busy from the start: every
// non-root sends its block straight to the root in one message, and the root posts all n-1
// receives at once, each straight into its place in recvbuf. No rank forwards anything, so there
// are no extra copies and no scratch. The price is latency that grows with n at the root (n-1
// messages to process) — for small blocks the binomial tree (gather_binomial.cc) is cheaper.
//
// Written in fan primitives (fan_primitives.h): a fan-in without reduction, one Recv per peer
// into its block with a window of n-1 so all are posted at once, and a Send from each non-root.
// Tags: the only message of each pair is number 0.
#include <algorithm>
#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"
#include "algorithms/gather.h"

namespace braid::algorithms {

Status DirectGather(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t count = args.count;
  const size_t block = count * DataTypeSize(args.type);
  const int n = ctx.size;
  const int root = args.root;
  if (count == 0) return Status::Ok();
  FanPrimitives::Options options;
  options.window = static_cast<size_t>(std::max(1, n - 1));
  FanPrimitives prims(ctx, args, "direct", options);
  if (ctx.rank != root) {
    prims.Send(root, args.sendbuf, Span{0, count});
    return prims.Finish();
  }
  char* out = static_cast<char*>(args.recvbuf);
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) prims.Recv(peer, out, Span{static_cast<size_t>(peer) * count, count});
  }
  // In place, the root's block already sits at its offset.
  if (args.sendbuf != out + root * block) std::memmove(out + root * block, args.sendbuf, block);
  return prims.Finish();
}

// Priced by work (cost::RootedCall says why not the root's n-1 message steps): see
// cost::DirectBlocksCost.
double DirectGatherCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::DirectBlocksCost(link, n, static_cast<double>(bytes));
}

}  // namespace braid::algorithms
