// Binomial-tree gather.
//
// Why a binomial tree: with small blocks a gather is all latency, and the direct gather makes the
// root handle n-1 messages one after another. In a binomial tree over ranks renumbered relative
// to the root (v = (rank - root) mod n), rank v's children are v+1, v+2, v+4, ... below v's
// lowest set bit (and below n); each rank receives its children's subtrees, appends them to its
// own block and sends the whole subtree to its parent v - lowbit(v) in one message. The root
// hears from ceil(log2 n) children only, so the gather takes ceil(log2 n) message steps instead
// of n-1. The price is that blocks are copied into scratch and forwarded once per level, so for
// large blocks the direct gather (gather_direct.cc) wins.
//
// Layout: a subtree of relative ranks [v, v + size) travels packed in relative order, so child
// c = v+m's subtree lands at position m of v's scratch; the root unpacks position i into block
// (i + root) mod n of recvbuf. Leaves send straight from sendbuf.
//
// Slices: to keep scratch bounded for large blocks, the gather runs one slice at a time: slice j
// is elements [j*s, (j+1)*s) of every block (a gather of s elements on its own), with s =
// chunk_bytes per block lowered so n*s elements fit kMaxScratchBytes.
//
// Written in FanRounds (fan_primitives.h): per slice, one Recv per child into the child's place of
// the packed subtree, all posted at once and waited for, then one Send of the whole subtree to
// the parent, waited for before the next slice reuses scratch.
// Tags: the message from child c in slice j is number j*levels + log2(lowbit(c)) on both sides.
#include <algorithm>
#include <cstring>

#include "algorithms/binomial_tree.h"
#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"
#include "algorithms/gather.h"

namespace braid::algorithms {
namespace {

constexpr size_t kMaxScratchBytes = size_t{32} << 20;

}  // namespace

Status BinomialGather(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t elem = DataTypeSize(args.type);
  const size_t count = args.count;
  const size_t block = count * elem;
  const int n = ctx.size;
  const int root = args.root;
  if (count == 0) return Status::Ok();
  char* out = static_cast<char*>(args.recvbuf);
  const char* in = static_cast<const char*>(args.sendbuf);
  if (n == 1) {
    if (in != out) std::memmove(out, in, block);
    return Status::Ok();
  }

  const int v = (ctx.rank - root + n) % n;
  const int low = BinomialLowBit(v, n);
  const int subtree = std::min(low, n - v);  // relative ranks [v, v + subtree)
  const int levels = cost::CeilLog2(BinomialLowBit(0, n));
  const bool leaf = subtree == 1;
  const int parent = v == 0 ? -1 : (v - low + root + n) % n;

  size_t per_block = std::min(ctx.chunk_bytes, kMaxScratchBytes / n);
  const size_t slice_elems = std::min(count, std::max<size_t>(1, per_block / elem));
  const size_t slices = (count + slice_elems - 1) / slice_elems;
  char* scratch = leaf ? nullptr : static_cast<char*>(ctx.scratch(subtree * slice_elems * elem));

  FanRound round(ctx, args, "binomial");
  for (size_t j = 0; j < slices; ++j) {
    const size_t first = j * slice_elems;
    const size_t len = std::min(slice_elems, count - first);  // one block's slice, the stride
    for (int m = 1; m < low && v + m < n; m <<= 1) {
      const size_t blocks = static_cast<size_t>(std::min(m, n - (v + m)));
      round.Recv((v + m + root) % n, j * levels + cost::CeilLog2(m), scratch,
                 Span{m * len, blocks * len});
    }
    if (!leaf) std::memcpy(scratch, in + first * elem, len * elem);
    BRAID_RETURN_IF_ERROR(round.Wait());
    if (v != 0) {
      const uint64_t message = j * levels + cost::CeilLog2(low);
      if (leaf) {
        round.Send(parent, message, in, Span{first, len});
      } else {
        round.Send(parent, message, scratch, Span{0, subtree * len});
      }
      BRAID_RETURN_IF_ERROR(round.Wait());  // scratch is reused by the next slice
      continue;
    }
    for (int i = 0; i < n; ++i) {
      char* target = out + ((i + root) % n) * block + first * elem;
      if (i == 0 && in == out + root * block) continue;  // in place: already there
      std::memcpy(target, scratch + i * len * elem, len * elem);
    }
  }
  return Status::Ok();
}

// Priced by work (cost::RootedCall says why not the tree's ceil(log2 n) steps): see
// cost::BinomialBlocksCost.
double BinomialGatherCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::BinomialBlocksCost(link, n, static_cast<double>(bytes));
}

}  // namespace braid::algorithms
