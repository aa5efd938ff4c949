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
// child's chunk c is folded in, so all levels work at once on large buffers. Receives land in a
// ring of kRecvWindow scratch slots, posted ahead in the order they are consumed; non-root
// accumulators live in kAccSlots scratch slots (the root accumulates in recvbuf), and a slot is
// reused only after the send that read it completed. Message c on every edge is chunk c, tagged
// MessageTag(sequence, c) on both sides.
#include "algorithms/reduce_binomial.h"

#include "algorithms/binomial_tree.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/operation_context.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {
namespace {

constexpr size_t kRecvWindow = 4;
constexpr size_t kAccSlots = 4;

}  // namespace

Status BinomialReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                      size_t count, DataType type, ReduceOp op, int root) {
  const size_t elem = DataTypeSize(type);
  const int n = ctx.size;
  const bool is_root = ctx.rank == root;
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  if (n == 1) {
    if (in != out) std::memcpy(out, in, count * elem);
    return Status::Ok();  // an average over one rank is the value itself
  }

  const BinomialTree tree = MakeBinomialTree(ctx.rank, n, root);
  const int parent = tree.parent;
  // Smallest subtree first: it finishes first, so its data is reduced while bigger ones arrive.
  const std::vector<int> children(tree.children.rbegin(), tree.children.rend());

  transport::Connection* up = nullptr;
  if (parent >= 0) {
    BRAID_ASSIGN_OR_RETURN(up, ctx.connection(parent));
  }
  std::vector<transport::Connection*> down;
  for (int child : children) {
    BRAID_ASSIGN_OR_RETURN(transport::Connection * c, ctx.connection(child));
    down.push_back(c);
  }

  const size_t chunk_elems = std::min(count, std::max<size_t>(1, ctx.chunk_bytes / elem));
  const size_t chunks = (count + chunk_elems - 1) / chunk_elems;
  const size_t slot_bytes = chunk_elems * elem;
  auto chunk_len = [&](size_t c) { return std::min(chunk_elems, count - c * chunk_elems); };
  const bool needs_acc = !is_root && !children.empty();
  char* scratch = children.empty() ? nullptr
                                   : static_cast<char*>(ctx.scratch(
                                         (kRecvWindow + (needs_acc ? kAccSlots : 0)) * slot_bytes));
  char* recv_slots = scratch;
  char* acc_slots = needs_acc ? scratch + kRecvWindow * slot_bytes : nullptr;
  auto fail = [&](const Status& status, const char* what, int peer) {
    const CollectiveArgs call{Collective::kReduce, sendbuf, recvbuf, count, type, op, root};
    return WithOperationContext(status, ctx, call, "binomial", what, peer);
  };

  // Receives are numbered j = c * children + k and consumed in that order.
  const size_t total_recvs = chunks * children.size();
  std::vector<transport::RequestPtr> recvs(kRecvWindow);
  size_t posted = 0;
  auto post_recvs = [&](size_t limit) {
    for (; posted < std::min(limit, total_recvs); ++posted) {
      size_t c = posted / children.size(), k = posted % children.size();
      recvs[posted % kRecvWindow] = down[k]->PostRecv(recv_slots + (posted % kRecvWindow) * slot_bytes,
                                                      chunk_len(c) * elem,
                                                      MessageTag(ctx.sequence, c));
    }
  };
  std::vector<transport::RequestPtr> sends(kAccSlots);  // by chunk % kAccSlots
  auto wait_send = [&](size_t slot) -> Status {
    if (sends[slot] == nullptr) return Status::Ok();
    Status status = sends[slot]->Wait(ctx.deadline);
    sends[slot] = nullptr;
    return status.ok() ? status : fail(status, "sending to", parent);
  };

  post_recvs(kRecvWindow);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t offset = c * chunk_elems * elem, len = chunk_len(c);
    const char* acc = in + offset;  // leaves send their input as it is
    if (!children.empty()) {
      char* target = is_root ? out + offset : acc_slots + (c % kAccSlots) * slot_bytes;
      BRAID_RETURN_IF_ERROR(wait_send(c % kAccSlots));  // the slot's previous send read it
      for (size_t k = 0; k < children.size(); ++k) {
        size_t j = c * children.size() + k;
        Status status = recvs[j % kRecvWindow]->Wait(ctx.deadline);
        if (!status.ok()) return fail(status, "receiving from", children[k]);
        kernels::ReduceInto(type, op, target, k == 0 ? in + offset : target,
                            recv_slots + (j % kRecvWindow) * slot_bytes, len);
        post_recvs(j + 1 + kRecvWindow);  // slot j % kRecvWindow is free again
      }
      acc = target;
      if (is_root && op == ReduceOp::kAvg) kernels::DivideInPlace(type, target, len, n);
    }
    if (up != nullptr) {
      BRAID_RETURN_IF_ERROR(wait_send(c % kAccSlots));
      sends[c % kAccSlots] = up->PostSend(acc, len * elem, MessageTag(ctx.sequence, c));
    }
  }
  for (size_t slot = 0; slot < kAccSlots; ++slot) BRAID_RETURN_IF_ERROR(wait_send(slot));
  return Status::Ok();
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
