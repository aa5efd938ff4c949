// Double binary tree allreduce (NCCL's "tree").
//
// Why trees: a ring pays 2(n-1) message latencies; a tree reduces to its root and broadcasts back
// in 2 log2(n), which is what matters once n grows or buffers shrink. A single binary tree wastes
// half the links, though: leaves (half the ranks) only send once and receive once, and inner nodes
// do all the work. NCCL's answer is two complementary trees: the buffer is split in halves, tree 0
// allreduces the first and tree 1 the second, and tree 1 is tree 0 mirrored (n even: rank r plays
// n-1-r) or shifted by one (n odd), so a rank that is a leaf in one tree is an inner node in the
// other and every rank carries about the same load.
//
// Shape of one tree (NCCL's ncclGetBtree, root 0, in-order numbering): a rank's lowest set bit b
// gives its parent (r ^ b) | 2b, or r ^ b when that is out of range, and its children r - b/2 and
// r + b/2 (the latter shrunk while out of range). Rank 0 is the root and has one child, the
// largest power of two below n.
//
// Pipelining: each half is cut into chunks of ctx.chunk_bytes. Per chunk, a node receives its
// children's partials, folds them into its own (own value first, then child 0, then child 1) and
// sends the result up; the root's result is final (kAvg divides there, once) and flows back down,
// each node forwarding it to its children. Leaves stream chunk after chunk while the root is
// still receiving earlier ones. A rank's schedule interleaves both trees: for i = 0, 1, ...:
// up-step of chunk i in tree 0, then tree 1, then down-step of chunk i - kLag in tree 0, then
// tree 1. The lag keeps up to kLag chunks climbing while earlier ones descend (deadlock-free: a
// step only waits on the same step of a neighbour, or on steps earlier in the common order).
// Every rank derives the same schedule, so the messages between two ranks are posted in the same
// order on both ends, as connections require. Written in fan primitives (fan_primitives.h), a
// step is one move: up, a leaf sends its input (Send), an inner node fans its children in over
// its own value and sends the partial up (RecvReduceSend), the root fans in and completes
// (RecvReduce); down, a node receives the final value and fans it out to its children
// (RecvCopySend), the root fans out (Send). Receives are posted up to kWindow ahead in schedule
// order; partials land in kWindow scratch slots, final values straight in recvbuf.
//
// Buffers: a node accumulates in recvbuf and later receives the final value over that same range.
// That is safe: the parent can only send the final value after it received all of our partial.
// Leaves send sendbuf as it is. Every rank ends with the bits the root computed, so results are
// identical everywhere.
#include "algorithms/allreduce_tree.h"

#include <algorithm>
#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"

namespace braid::algorithms {
namespace {

constexpr size_t kWindow = 8;

TreeLinks BinaryTree(int n, int rank) {
  TreeLinks links;
  int bit = 1;
  while (bit < n && (bit & rank) == 0) bit <<= 1;
  if (rank == 0) {
    links.children[0] = n > 1 ? bit >> 1 : -1;  // the root has a single child
    return links;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  links.parent = up;
  int low = bit >> 1;
  if (low > 0) {
    links.children[0] = rank - low;
    while (low > 0 && rank + low >= n) low >>= 1;
    if (low > 0) links.children[1] = rank + low;
  }
  return links;
}

// A node's children as a fan: child 1 exists only beside child 0.
PeerSet Children(const TreeLinks& links) {
  return PeerSet(links.children, (links.children[0] >= 0) + (links.children[1] >= 0));
}

}  // namespace

TreeLinks DoubleBinaryTree(int n, int rank, int tree) {
  if (tree == 0) return BinaryTree(n, rank);
  // Tree 1: mirror (n even) or shift by one (n odd) tree 0, mapping ranks both ways.
  const bool mirror = n % 2 == 0;
  auto to_tree0 = [&](int r) { return mirror ? n - 1 - r : (r - 1 + n) % n; };
  auto from_tree0 = [&](int r) { return r < 0 ? -1 : mirror ? n - 1 - r : (r + 1) % n; };
  TreeLinks links = BinaryTree(n, to_tree0(rank));
  links.parent = from_tree0(links.parent);
  links.children[0] = from_tree0(links.children[0]);
  links.children[1] = from_tree0(links.children[1]);
  return links;
}

Status TreeAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                     size_t count, DataType type, ReduceOp op) {
  const size_t elem = DataTypeSize(type);
  const int n = ctx.size;
  if (count == 0) return Status::Ok();
  if (n == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * elem);
    return Status::Ok();
  }

  // Tree t reduces elements [begin[t], begin[t] + len[t]).
  const size_t begin[2] = {0, (count + 1) / 2};
  const size_t len[2] = {(count + 1) / 2, count / 2};
  const size_t chunk_elems = std::min(len[0], std::max<size_t>(1, ctx.chunk_bytes / elem));
  const size_t chunks[2] = {(len[0] + chunk_elems - 1) / chunk_elems,
                            (len[1] + chunk_elems - 1) / chunk_elems};
  auto chunk = [&](int t, size_t c) {
    return Span{begin[t] + c * chunk_elems, std::min(chunk_elems, len[t] - c * chunk_elems)};
  };
  const TreeLinks links[2] = {DoubleBinaryTree(n, ctx.rank, 0), DoubleBinaryTree(n, ctx.rank, 1)};
  const PeerSet children[2] = {Children(links[0]), Children(links[1])};
  const int depth = cost::CeilLog2(n) + 1;
  const size_t lag = 2 * static_cast<size_t>(depth);  // about one round trip of chunks in flight

  const CollectiveArgs args{Collective::kAllReduce, sendbuf, recvbuf, count, type, op};
  FanPrimitives::Options options;
  options.window = kWindow;
  options.slot_elems = chunk_elems;
  FanPrimitives prims(ctx, args, "tree", options);
  for (int t = 0; t < 2; ++t) {
    BRAID_RETURN_IF_ERROR(prims.Connect(links[t].parent));
    BRAID_RETURN_IF_ERROR(prims.Connect(children[t]));
  }
  // The schedule (see the why block): up-step of chunk i in both trees, then down-step of chunk
  // i - lag in both.
  for (size_t i = 0; i < chunks[0] + lag && prims.ok(); ++i) {
    for (int t = 0; t < 2; ++t) {
      if (i >= chunks[t]) continue;
      const Span span = chunk(t, i);
      if (children[t].empty()) {
        prims.Send(links[t].parent, sendbuf, span);
      } else if (links[t].parent >= 0) {
        prims.RecvReduceSend(children[t], recvbuf, sendbuf, links[t].parent, span);
      } else {
        prims.RecvReduce(children[t], recvbuf, sendbuf, span);
      }
    }
    for (int t = 0; t < 2; ++t) {
      if (i < lag || i - lag >= chunks[t]) continue;
      const Span span = chunk(t, i - lag);
      if (links[t].parent >= 0) {
        prims.RecvCopySend(links[t].parent, recvbuf, children[t], span);
      } else {
        prims.Send(children[t], recvbuf, span);
      }
    }
  }
  return prims.Finish();
}

Status RunTreeAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return TreeAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op);
}

// Two pipelined trees of depth ~log2(n)+1, each carrying half the buffer up and back down: 2 depth
// latencies, plus about two buffers' worth of traffic through the busiest rank (it is an inner
// node, two children, in one tree and a leaf in the other; with 2 ranks each rank sends the
// buffer once), plus a whole-buffer reduction there (half with 2 ranks).
double TreeAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const int depth = cost::CeilLog2(n);
  const double traffic = n == 2 ? 1.0 : 2.0, reduced = n == 2 ? 0.5 : 1.0;
  return link.pipeline_us + 2 * depth * link.latency_us + cost::Transfer(link, traffic * b) +
         cost::Reduce(link, reduced * b) + cost::ChunkMessages(link, 2 * depth, b);
}

}  // namespace braid::algorithms
