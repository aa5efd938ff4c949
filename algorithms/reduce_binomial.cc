// Binomial-tree reduce.
//
// Why a binomial tree: the mirror of the binomial broadcast. Partial results halve in number every
// step, so the root holds the reduction after ceil(log2 n) message latencies, against n-1 for a
// chain. Small reductions are latency-bound and want exactly that. On large buffers the root
// receives and reduces the whole buffer once per child (ceil(log2 n) times), where a pipelined
// chain does it once: the ring family wins there.
//
// Shape: ranks are renumbered relative to the root (v = (rank - root) mod n). Rank v receives from
// v + 2^k for every 2^k below its lowest set bit, smallest subtree first (it finishes first), folds
// each into its accumulator in that fixed order, then sends the accumulator to v minus its lowest
// bit. Leaves send sendbuf as it is.
//
// Pipelining: the buffer is cut into chunks of ctx.chunk_bytes; chunk c goes up as soon as every
// child's chunk c is folded in, so all levels work at once on large buffers. Written in fan
// primitives (fan_primitives.h): per chunk a leaf sends its input (Send), an inner rank fans in
// its children and sends the partial up (RecvReduceSend, accumulating in one of kAccSlots scratch
// slots, each reused once the send that read it completed), and the root fans in into recvbuf
// (RecvReduce: the complete result, kAvg divided there once). Children's chunks land in kWindow
// scratch slots, posted ahead in the order they are folded. Message c on every edge is chunk c.
#include "algorithms/reduce_binomial.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/binomial_tree.h"
#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"

namespace braid::algorithms {
namespace {

constexpr size_t kWindow = 4;
constexpr size_t kAccSlots = 4;

}  // namespace

Status BinomialReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                      size_t count, DataType type, ReduceOp op, int root) {
  const size_t elem = DataTypeSize(type);
  if (count == 0) return Status::Ok();
  if (ctx.size == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * elem);
    return Status::Ok();  // an average over one rank is the value itself
  }

  const BinomialTree tree = MakeBinomialTree(ctx.rank, ctx.size, root);
  // Smallest subtree first: it finishes first, so its data is reduced while bigger ones arrive.
  // The fold order (own value, then the children in this order) is the same on every run.
  const std::vector<int> children(tree.children.rbegin(), tree.children.rend());
  const CollectiveArgs args{Collective::kReduce, sendbuf, recvbuf, count, type, op, root};
  FanPrimitives::Options options;
  options.window = kWindow;
  // Slots no longer than the buffer: a small reduce takes little scratch.
  options.slot_elems = std::min(count, std::max<size_t>(1, ctx.chunk_bytes / elem));
  options.acc_slots = tree.parent >= 0 ? kAccSlots : 0;
  FanPrimitives prims(ctx, args, "binomial", options);
  BRAID_RETURN_IF_ERROR(prims.Connect(tree.parent));
  BRAID_RETURN_IF_ERROR(prims.Connect(children));
  const size_t chunks = prims.SliceCount(count);
  for (size_t c = 0; c < chunks && prims.ok(); ++c) {
    const Span chunk = prims.Slice(count, c);
    if (children.empty()) {
      prims.Send(tree.parent, sendbuf, chunk);  // a leaf's partial is its input
    } else if (tree.parent >= 0) {
      prims.RecvReduceSend(children, nullptr, sendbuf, tree.parent, chunk);
    } else {
      prims.RecvReduce(children, recvbuf, sendbuf, chunk);
    }
  }
  return prims.Finish();
}

Status RunBinomialReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return BinomialReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op, args.root);
}

// Priced by work, not by the path's floor(log2 n) latencies (cost::RootedCall says why): the root
// receives and reduces the whole buffer once per child, ceil(log2 n) times; all ranks together
// make the chain's n-1 transfers and reductions.
double BinomialReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const int children = cost::CeilLog2(n);
  return cost::RootedCall(link, children * (cost::RankShare(link, 1, b) + cost::Reduce(link, b)),
                          cost::RankShare(link, 2 * (n - 1), b) + (n - 1) * cost::Reduce(link, b));
}

}  // namespace braid::algorithms
