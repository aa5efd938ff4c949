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
// Receives land straight in recvbuf (no scratch); up to kRecvWindow of them are posted ahead.
// Message c on every tree edge is chunk c, tagged MessageTag(sequence, c) on both sides.
#include "algorithms/broadcast_binomial.h"

#include "algorithms/binomial_tree.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/operation_context.h"

namespace braid::algorithms {
namespace {

constexpr size_t kRecvWindow = 8;

}  // namespace

Status BinomialBroadcast(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                         size_t count, DataType type, int root) {
  const size_t elem = DataTypeSize(type);
  const int n = ctx.size;
  const bool is_root = ctx.rank == root;
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  if (n == 1) {
    if (in != out) std::memcpy(out, in, count * elem);
    return Status::Ok();
  }

  const BinomialTree tree = MakeBinomialTree(ctx.rank, n, root);
  const int parent = tree.parent;
  const std::vector<int>& children = tree.children;

  transport::Connection* up = nullptr;
  if (parent >= 0) {
    BRAID_ASSIGN_OR_RETURN(up, ctx.connection(parent));
  }
  std::vector<transport::Connection*> down;
  for (int child : children) {
    BRAID_ASSIGN_OR_RETURN(transport::Connection * c, ctx.connection(child));
    down.push_back(c);
  }

  const size_t chunk_elems = std::max<size_t>(1, ctx.chunk_bytes / elem);
  const size_t chunks = (count + chunk_elems - 1) / chunk_elems;
  auto chunk_len = [&](size_t c) { return std::min(chunk_elems, count - c * chunk_elems); };
  // The root sends from sendbuf (copied into recvbuf at the end, overlapping the sends).
  const char* source = is_root ? in : out;
  auto fail = [&](const Status& status, const char* what, int peer) {
    CollectiveArgs call;  // as errors name it: only the fields OperationContext reads
    call.kind = Collective::kBroadcast;
    call.count = count;
    call.type = type;
    call.root = root;
    return WithOperationContext(status, ctx, call, "binomial", what, peer);
  };

  std::deque<transport::RequestPtr> recvs;
  size_t posted = 0;
  auto post_recvs = [&](size_t limit) {
    for (; up != nullptr && posted < std::min(limit, chunks); ++posted) {
      recvs.push_back(up->PostRecv(out + posted * chunk_elems * elem, chunk_len(posted) * elem,
                                   MessageTag(ctx.sequence, posted)));
    }
  };
  std::vector<std::deque<transport::RequestPtr>> sends(down.size());
  post_recvs(kRecvWindow);
  for (size_t c = 0; c < chunks; ++c) {
    if (up != nullptr) {
      Status status = recvs.front()->Wait(ctx.deadline);
      if (!status.ok()) return fail(status, "receiving from", parent);
      recvs.pop_front();
      post_recvs(c + 1 + kRecvWindow);
    }
    for (size_t k = 0; k < down.size(); ++k) {
      sends[k].push_back(down[k]->PostSend(source + c * chunk_elems * elem, chunk_len(c) * elem,
                                           MessageTag(ctx.sequence, c)));
      while (!sends[k].empty() && sends[k].front()->Test() && sends[k].front()->status().ok()) {
        sends[k].pop_front();
      }
    }
  }
  if (is_root && in != out) std::memcpy(out, in, count * elem);
  for (size_t k = 0; k < down.size(); ++k) {
    for (const transport::RequestPtr& send : sends[k]) {
      Status status = send->Wait(ctx.deadline);
      if (!status.ok()) return fail(status, "sending to", children[k]);
    }
  }
  return Status::Ok();
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
