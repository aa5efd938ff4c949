#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective_context.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::algorithms {

// One rank's place in a binary tree: parent (-1 at the root) and up to two children (-1 if none).
struct TreeLinks {
  int parent = -1;
  int children[2] = {-1, -1};
};

// NCCL's double binary tree on n ranks, tree 0 or 1 (see allreduce_tree.cc). Every rank appears
// in both trees; roughly, the leaves of one tree are the inner nodes of the other.
TreeLinks DoubleBinaryTree(int n, int rank, int tree);

// recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank, bitwise identical on
// every rank. sendbuf may equal recvbuf (in place). kAvg divides by ctx.size (integers truncate).
Status TreeAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                     size_t count, DataType type, ReduceOp op);

// Registry adapters (algorithms/registry.cc).
Status RunTreeAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args);
double TreeAllReduceCost(const LinkModel& link, int nranks, size_t bytes);

}  // namespace braid::algorithms
