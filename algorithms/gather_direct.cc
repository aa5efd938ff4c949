// Direct gather.
//
// Why direct: the root must take in (n-1) blocks through its own link whatever the shape, so for
// large blocks the fastest gather is the one that keeps that link busy from the start: every
// non-root sends its block straight to the root in one message, and the root posts all n-1
// receives at once, each straight into its place in recvbuf. No rank forwards anything, so there
// are no extra copies and no scratch. The price is latency that grows with n at the root (n-1
// messages to process) — for small blocks the binomial tree (gather_binomial.cc) is cheaper.
//
// Written as one FanRound (fan_primitives.h): the root posts a Recv per peer into its block, each
// other rank one Send, and all wait.
// Tags: the only message of each pair is number 0.
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
  FanRound round(ctx, args, "direct");
  if (ctx.rank != root) {
    round.Send(root, 0, args.sendbuf, Span{0, count});
    return round.Wait();
  }
  char* out = static_cast<char*>(args.recvbuf);
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) round.Recv(peer, 0, out, Span{static_cast<size_t>(peer) * count, count});
  }
  // In place, the root's block already sits at its offset.
  if (args.sendbuf != out + root * block) std::memmove(out + root * block, args.sendbuf, block);
  return round.Wait();
}

// Priced by work (cost::RootedCall says why not the root's n-1 message steps): see
// cost::DirectBlocksCost.
double DirectGatherCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::DirectBlocksCost(link, n, static_cast<double>(bytes));
}

}  // namespace braid::algorithms
