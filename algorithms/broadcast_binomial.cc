// Binomial-tree broadcast.
//
// Why a binomial tree: the ranks holding the data double every step, so the last rank has it
// after ceil(log2 n) message latencies instead of the n-1 of a chain. That is what small
// broadcasts pay for; large ones are bandwidth-bound, and there the root, which sends the whole
// buffer to each of its ceil(log2 n) children, is the bottleneck — a pipelined chain (ring family)
// sends it once per rank and wins.
//
// Shape: ranks are renumbered relative to the root (v = (rank - root) mod n). Rank v receives from
// v with its lowest set bit cleared and sends to v + 2^k for every 2^k below that bit, largest
// subtree first, so the deepest branch starts earliest. The root owns every bit.
//
// Pipelining: the buffer is cut into chunks of ctx.chunk_bytes and each chunk is forwarded to the
// children as soon as it arrives, so on large buffers the levels of the tree work at the same time.
// Written in fan primitives (fan_primitives.h): per chunk the root fans out (Send to every child),
// every other rank receives from its parent and fans out what landed (RecvCopySend; leaves have
// no children, so it is a Recv). Receives land straight in recvbuf (no scratch); up to kWindow of
// them are posted ahead. Message c on every tree edge is chunk c.
#include "algorithms/broadcast_binomial.h"

#include <cstring>

#include "algorithms/binomial_tree.h"
#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"

namespace braid::algorithms {
namespace {

constexpr size_t kWindow = 8;

}  // namespace

Status BinomialBroadcast(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                         size_t count, DataType type, int root) {
  const size_t elem = DataTypeSize(type);
  if (count == 0) return Status::Ok();
  if (ctx.size == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * elem);
    return Status::Ok();
  }

  CollectiveArgs args;  // as errors name it: only the fields OperationContext reads
  args.kind = Collective::kBroadcast;
  args.count = count;
  args.type = type;
  args.root = root;
  FanPrimitives prims(ctx, args, "binomial", {kWindow});
  const BinomialTree tree = MakeBinomialTree(ctx.rank, ctx.size, root);
  BRAID_RETURN_IF_ERROR(prims.Connect(tree.parent));
  BRAID_RETURN_IF_ERROR(prims.Connect(tree.children));
  const size_t chunks = prims.SliceCount(count);
  for (size_t c = 0; c < chunks && prims.ok(); ++c) {
    const Span chunk = prims.Slice(count, c);
    if (tree.parent < 0) {
      prims.Send(tree.children, sendbuf, chunk);
    } else {
      prims.RecvCopySend(tree.parent, recvbuf, tree.children, chunk);
    }
  }
  // The root sent from sendbuf; its own copy overlaps the sends still in flight.
  if (tree.parent < 0 && sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * elem);
  return prims.Finish();
}

Status RunBinomialBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return BinomialBroadcast(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.root);
}

// Priced by work, not by the path's floor(log2 n) latencies (cost::RootedCall says why): the root
// sends the whole buffer to each of its ceil(log2 n) children, and a rank with k children
// (k < ceil(log2 n)) receives it once and sends it k times, never more; all ranks together make
// the chain's n-1 transfers.
double BinomialBroadcastCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  return cost::RootedCall(link, cost::RankShare(link, cost::CeilLog2(n), b),
                          cost::RankShare(link, 2 * (n - 1), b));
}

}  // namespace braid::algorithms
