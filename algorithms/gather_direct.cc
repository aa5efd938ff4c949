// Direct gather.
//
// Why direct: the root must take in (n-1) blocks through its own link whatever the shape, so for
// large blocks the fastest gather is the one that keeps that link busy from the start: every
// non-root sends its block straight to the root in one message, and the root posts all n-1
// receives at once, each straight into its place in recvbuf. No rank forwards anything, so there
// are no extra copies and no scratch. The price is latency that grows with n at the root (n-1
// messages to process) — for small blocks the binomial tree (gather_binomial.cc) is cheaper.
//
// Tags: the only message of each pair is number 0.
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/gather.h"
#include "algorithms/operation_context.h"

namespace braid::algorithms {
namespace {

constexpr const char* kName = "direct";  // in error messages

}  // namespace

Status DirectGather(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t block = args.count * DataTypeSize(args.type);
  const int n = ctx.size;
  const int root = args.root;
  if (args.count == 0) return Status::Ok();
  const uint64_t tag = MessageTag(ctx.sequence, 0);

  if (ctx.rank != root) {
    BRAID_ASSIGN_OR_RETURN(transport::Connection * connection, ctx.connection(root));
    Status status = connection->PostSend(args.sendbuf, block, tag)->Wait(ctx.deadline);
    if (!status.ok()) {
      return WithOperationContext(status, ctx, args, kName, "sending to", root);
    }
    return Status::Ok();
  }

  char* out = static_cast<char*>(args.recvbuf);
  std::vector<transport::RequestPtr> receives(n);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == root) continue;
    auto connection = ctx.connection(peer);
    if (!connection.ok()) return WithOperationContext(connection.status(), ctx, args, kName);
    receives[peer] = connection.value()->PostRecv(out + peer * block, block, tag);
  }
  // In place, the root's block already sits at its offset.
  if (args.sendbuf != out + root * block) std::memmove(out + root * block, args.sendbuf, block);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == root) continue;
    Status status = receives[peer]->Wait(ctx.deadline);
    if (!status.ok()) {
      return WithOperationContext(status, ctx, args, kName, "receiving from", peer);
    }
  }
  return Status::Ok();
}

// Priced by work (cost::RootedCall says why not the root's n-1 message steps): see
// cost::DirectBlocksCost.
double DirectGatherCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::DirectBlocksCost(link, n, static_cast<double>(bytes));
}

}  // namespace braid::algorithms
