// Direct scatter.
//
// Why direct: the root must push (n-1) blocks through its own link whatever the shape, so for
// large blocks the fastest scatter keeps that link busy from the start: the root posts all n-1
// sends at once, each straight from its block of sendbuf, and every other rank receives its block
// straight into recvbuf in one message. Nothing is forwarded, copied twice or staged in scratch.
// The price is latency that grows with n at the root — for small blocks the binomial tree
// (scatter_binomial.cc) is cheaper.
//
// Tags: the only message of each pair is number 0.
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/operation_context.h"
#include "algorithms/scatter.h"

namespace braid::algorithms {
namespace {

constexpr const char* kName = "direct";  // in error messages

}  // namespace

Status DirectScatter(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t block = args.count * DataTypeSize(args.type);
  const int n = ctx.size;
  const int root = args.root;
  if (args.count == 0) return Status::Ok();
  const uint64_t tag = MessageTag(ctx.sequence, 0);

  if (ctx.rank != root) {
    BRAID_ASSIGN_OR_RETURN(transport::Connection * connection, ctx.connection(root));
    Status status = connection->PostRecv(args.recvbuf, block, tag)->Wait(ctx.deadline);
    if (!status.ok()) {
      return WithOperationContext(status, ctx, args, kName, "receiving from", root);
    }
    return Status::Ok();
  }

  const char* in = static_cast<const char*>(args.sendbuf);
  std::vector<transport::RequestPtr> sends(n);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == root) continue;
    auto connection = ctx.connection(peer);
    if (!connection.ok()) return WithOperationContext(connection.status(), ctx, args, kName);
    sends[peer] = connection.value()->PostSend(in + peer * block, block, tag);
  }
  // In place, the root's block already sits at its offset.
  if (args.recvbuf != in + root * block) std::memmove(args.recvbuf, in + root * block, block);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == root) continue;
    Status status = sends[peer]->Wait(ctx.deadline);
    if (!status.ok()) {
      return WithOperationContext(status, ctx, args, kName, "sending to", peer);
    }
  }
  return Status::Ok();
}

// Priced by work (cost::RootedCall says why not the root's n-1 message steps): see
// cost::DirectBlocksCost.
double DirectScatterCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::DirectBlocksCost(link, n, static_cast<double>(bytes));
}

}  // namespace braid::algorithms
