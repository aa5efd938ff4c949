// Binomial-tree scatter.
//
// Why a binomial tree: with small blocks a scatter is all latency, and the direct scatter makes
// the root issue n-1 messages one after another. In a binomial tree over ranks renumbered
// relative to the root (v = (rank - root) mod n), rank v receives the blocks of its whole subtree
// [v, v + min(lowbit(v), n - v)) from its parent v - lowbit(v) in one message, then hands each
// child v+m (m = the powers of two below lowbit(v), largest first, so the deepest subtree starts
// soonest) the part for the child's subtree. Every rank is reached after at most ceil(log2 n)
// message steps instead of n-1. The price is that blocks are staged in scratch and forwarded once
// per level, so for large blocks the direct scatter (scatter_direct.cc) wins.
//
// Layout: a subtree travels packed in relative order, so child c = v+m's part is position m of
// v's scratch; the root packs block (i + root) mod n of sendbuf into position i. Leaves receive
// straight into recvbuf.
//
// Slices: to keep scratch bounded for large blocks, the scatter runs one slice at a time: slice j
// is elements [j*s, (j+1)*s) of every block (a scatter of s elements on its own), with s =
// chunk_bytes per block lowered so n*s elements fit kMaxScratchBytes.
//
// Written in FanRounds (fan_primitives.h): per slice, one Recv of the subtree from the parent,
// waited for, then one Send per child (largest subtree first, from the child's place of the
// packed subtree), the own block copied meanwhile, all waited for before the next slice reuses
// scratch.
// Tags: the message to child c in slice j is number j*levels + log2(lowbit(c)) on both sides.
#include <algorithm>
#include <cstring>

#include "algorithms/binomial_tree.h"
#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"
#include "algorithms/scatter.h"

namespace braid::algorithms {
namespace {

constexpr size_t kMaxScratchBytes = size_t{32} << 20;

}  // namespace

Status BinomialScatter(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t elem = DataTypeSize(args.type);
  const size_t count = args.count;
  const size_t block = count * elem;
  const int n = ctx.size;
  const int root = args.root;
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(args.sendbuf);
  char* out = static_cast<char*>(args.recvbuf);
  if (n == 1) {
    if (in != out) std::memmove(out, in, block);
    return Status::Ok();
  }

  const int v = (ctx.rank - root + n) % n;
  const int low = BinomialLowBit(v, n);
  const int subtree = std::min(low, n - v);  // relative ranks [v, v + subtree)
  const int levels = cost::CeilLog2(BinomialLowBit(0, n));
  const bool leaf = subtree == 1;
  const int parent = (v - low + root + n) % n;  // only for v != 0

  size_t per_block = std::min(ctx.chunk_bytes, kMaxScratchBytes / n);
  const size_t slice_elems = std::min(count, std::max<size_t>(1, per_block / elem));
  const size_t slices = (count + slice_elems - 1) / slice_elems;
  char* scratch = leaf ? nullptr : static_cast<char*>(ctx.scratch(subtree * slice_elems * elem));

  FanRound round(ctx, args, "binomial");
  for (size_t j = 0; j < slices; ++j) {
    const size_t first = j * slice_elems;
    const size_t len = std::min(slice_elems, count - first);  // one block's slice, the stride
    if (v == 0) {
      for (int i = 0; i < n; ++i) {
        std::memcpy(scratch + i * len * elem, in + ((i + root) % n) * block + first * elem,
                    len * elem);
      }
    } else {
      const uint64_t message = j * levels + cost::CeilLog2(low);
      if (leaf) {
        round.Recv(parent, message, out, Span{first, len});
      } else {
        round.Recv(parent, message, scratch, Span{0, subtree * len});
      }
      BRAID_RETURN_IF_ERROR(round.Wait());
    }
    for (int m = BinomialLowBit(0, n) / 2; m >= 1; m >>= 1) {
      if (m >= low || v + m >= n) continue;
      const size_t blocks = static_cast<size_t>(std::min(m, n - (v + m)));
      round.Send((v + m + root) % n, j * levels + cost::CeilLog2(m), scratch,
                 Span{m * len, blocks * len});
    }
    // The own block: leaves received it in place; the root in place already has it.
    if (!leaf && !(v == 0 && out == in + root * block)) {
      std::memcpy(out + first * elem, scratch, len * elem);
    }
    BRAID_RETURN_IF_ERROR(round.Wait());  // scratch is reused by the next slice
  }
  return Status::Ok();
}

// Priced by work (cost::RootedCall says why not the tree's ceil(log2 n) steps): see
// cost::BinomialBlocksCost.
double BinomialScatterCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::BinomialBlocksCost(link, n, static_cast<double>(bytes));
}

}  // namespace braid::algorithms
