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
// order on both ends, as connections require; tags are MessageTag(sequence, (chunk*2 + tree)*2 +
// phase). Receives are posted up to kRecvWindow ahead in schedule order; partials land in a ring
// of kRecvWindow scratch slots, final values straight in recvbuf.
//
// Buffers: a node accumulates in recvbuf and later receives the final value over that same range.
// That is safe: the parent can only send the final value after it received all of our partial.
// Leaves send sendbuf as it is. Every rank ends with the bits the root computed, so results are
// identical everywhere.
#include "algorithms/allreduce_tree.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/operation_context.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {
namespace {

constexpr size_t kRecvWindow = 8;

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

enum class Step { kRecvUp, kSendUp, kRootDone, kRecvDown, kSendDown };

struct Action {
  Step step;
  int tree;
  size_t chunk;
  int peer;   // -1 for kRootDone
  int child;  // kRecvUp: which child (0 folds into sendbuf's value, 1 into the partial)
};

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
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  if (n == 1) {
    if (in != out) std::memcpy(out, in, count * elem);
    return Status::Ok();
  }

  // Tree t reduces elements [begin[t], begin[t] + len[t]).
  const size_t begin[2] = {0, (count + 1) / 2};
  const size_t len[2] = {(count + 1) / 2, count / 2};
  const size_t chunk_elems = std::min(len[0], std::max<size_t>(1, ctx.chunk_bytes / elem));
  const size_t chunks[2] = {(len[0] + chunk_elems - 1) / chunk_elems,
                            (len[1] + chunk_elems - 1) / chunk_elems};
  auto range = [&](int t, size_t c, size_t* offset, size_t* length) {
    *offset = begin[t] + c * chunk_elems;
    *length = std::min(chunk_elems, len[t] - c * chunk_elems);
  };
  const TreeLinks links[2] = {DoubleBinaryTree(n, ctx.rank, 0), DoubleBinaryTree(n, ctx.rank, 1)};
  const int depth = cost::CeilLog2(n) + 1;
  const size_t lag = 2 * static_cast<size_t>(depth);  // about one round trip of chunks in flight

  // This rank's schedule (see the why block).
  std::vector<Action> schedule;
  for (size_t i = 0; i < chunks[0] + lag; ++i) {
    for (int t = 0; t < 2; ++t) {
      if (i >= chunks[t]) continue;
      for (int k = 0; k < 2; ++k) {
        if (links[t].children[k] >= 0) schedule.push_back({Step::kRecvUp, t, i, links[t].children[k], k});
      }
      schedule.push_back(links[t].parent >= 0 ? Action{Step::kSendUp, t, i, links[t].parent, 0}
                                              : Action{Step::kRootDone, t, i, -1, 0});
    }
    for (int t = 0; t < 2; ++t) {
      if (i < lag || i - lag >= chunks[t]) continue;
      const size_t c = i - lag;
      if (links[t].parent >= 0) schedule.push_back({Step::kRecvDown, t, c, links[t].parent, 0});
      for (int k = 0; k < 2; ++k) {
        if (links[t].children[k] >= 0) schedule.push_back({Step::kSendDown, t, c, links[t].children[k], k});
      }
    }
  }
  auto tag = [&](const Action& a) {
    bool down = a.step == Step::kRecvDown || a.step == Step::kSendDown;
    return MessageTag(ctx.sequence, (a.chunk * 2 + a.tree) * 2 + (down ? 1 : 0));
  };

  // Connections to every neighbour in either tree.
  std::vector<transport::Connection*> connections(n, nullptr);
  for (const TreeLinks& l : links) {
    for (int peer : {l.parent, l.children[0], l.children[1]}) {
      if (peer >= 0 && connections[peer] == nullptr) {
        BRAID_ASSIGN_OR_RETURN(connections[peer], ctx.connection(peer));
      }
    }
  }

  const size_t slot_bytes = chunk_elems * elem;
  char* slots = static_cast<char*>(ctx.scratch(kRecvWindow * slot_bytes));
  std::vector<size_t> receives;  // schedule indices of receives, in order
  for (size_t i = 0; i < schedule.size(); ++i) {
    if (schedule[i].step == Step::kRecvUp || schedule[i].step == Step::kRecvDown) receives.push_back(i);
  }
  // Receive r uses request slot r % kRecvWindow; up-receive u (counted among up-receives only)
  // lands in scratch slot u % kRecvWindow. Receive r is posted once receive r - kRecvWindow is
  // consumed, which frees both.
  std::vector<transport::RequestPtr> requests(kRecvWindow);
  std::vector<char*> landing(receives.size());
  size_t posted = 0, up_posted = 0;
  auto post_receives = [&](size_t limit) {
    for (; posted < std::min(limit, receives.size()); ++posted) {
      const Action& a = schedule[receives[posted]];
      size_t offset, length;
      range(a.tree, a.chunk, &offset, &length);
      char* target = a.step == Step::kRecvUp ? slots + (up_posted++ % kRecvWindow) * slot_bytes
                                             : out + offset * elem;
      landing[posted] = target;
      requests[posted % kRecvWindow] =
          connections[a.peer]->PostRecv(target, length * elem, tag(a));
    }
  };
  std::deque<std::pair<transport::RequestPtr, int>> sends;
  auto fail = [&](const Status& status, const char* what, int peer) {
    const CollectiveArgs call{Collective::kAllReduce, sendbuf, recvbuf, count, type, op};
    return WithOperationContext(status, ctx, call, "tree", what, peer);
  };

  post_receives(kRecvWindow);
  size_t consumed = 0;
  for (const Action& a : schedule) {
    size_t offset, length;
    range(a.tree, a.chunk, &offset, &length);
    char* mine = out + offset * elem;
    const bool has_children = links[a.tree].children[0] >= 0;
    switch (a.step) {
      case Step::kRecvUp:
      case Step::kRecvDown: {
        Status status = requests[consumed % kRecvWindow]->Wait(ctx.deadline);
        if (!status.ok()) return fail(status, "receiving from", a.peer);
        if (a.step == Step::kRecvUp) {
          kernels::ReduceInto(type, op, mine, a.child == 0 ? in + offset * elem : mine,
                              landing[consumed], length);
        }
        ++consumed;
        post_receives(consumed + kRecvWindow);
        break;
      }
      case Step::kRootDone:
        if (op == ReduceOp::kAvg) kernels::DivideInPlace(type, mine, length, n);
        break;
      case Step::kSendUp:
      case Step::kSendDown: {
        const char* source = (a.step == Step::kSendUp && !has_children) ? in + offset * elem : mine;
        sends.emplace_back(connections[a.peer]->PostSend(source, length * elem, tag(a)), a.peer);
        while (!sends.empty() && sends.front().first->Test() && sends.front().first->status().ok()) {
          sends.pop_front();
        }
        break;
      }
    }
  }
  for (const auto& [send, peer] : sends) {
    Status status = send->Wait(ctx.deadline);
    if (!status.ok()) return fail(status, "sending to", peer);
  }
  return Status::Ok();
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
