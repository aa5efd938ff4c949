#include "algorithms/operation_context.h"

namespace braid::algorithms {
namespace {

bool UsesOp(Collective kind) {
  return kind == Collective::kAllReduce || kind == Collective::kReduce ||
         kind == Collective::kReduceScatter;
}

bool UsesRoot(Collective kind) {
  return kind == Collective::kBroadcast || kind == Collective::kReduce ||
         kind == Collective::kGather || kind == Collective::kScatter;
}

// What `count` counts, where the collective's count is not the whole buffer's and the messages
// have always said so (collective.h: allgather's and reducescatter's are per rank too, but their
// messages never said it, and users match on them).
const char* CountUnit(Collective kind) {
  switch (kind) {
    case Collective::kAllToAll:
      return " per peer";
    case Collective::kGather:
    case Collective::kScatter:
      return " per rank";
    default:
      return "";
  }
}

}  // namespace

std::string OperationContext(const CollectiveContext& ctx, const CollectiveArgs& args,
                             const char* algorithm) {
  std::string text = "rank " + std::to_string(CommunicatorRank(ctx, ctx.rank)) + ": " +
                     CollectiveName(args.kind) + " #" + std::to_string(ctx.sequence) + " (";
  if (args.kind != Collective::kBarrier) {
    text += std::to_string(args.count) + " x " + DataTypeName(args.type) + CountUnit(args.kind);
    if (UsesOp(args.kind)) text += std::string(", ") + ReduceOpName(args.op);
    if (UsesRoot(args.kind)) text += ", root " + std::to_string(CommunicatorRank(ctx, args.root));
    text += ", ";
  }
  return text + algorithm + ")";
}

Status WithOperationContext(const Status& status, const CollectiveContext& ctx,
                            const CollectiveArgs& args, const char* algorithm) {
  return status.WithContext(OperationContext(ctx, args, algorithm));
}

Status WithOperationContext(const Status& status, const CollectiveContext& ctx,
                            const CollectiveArgs& args, const char* algorithm, const char* doing,
                            int peer) {
  return status.WithContext(OperationContext(ctx, args, algorithm) + ": " + doing + " rank " +
                            std::to_string(CommunicatorRank(ctx, peer)));
}

}  // namespace braid::algorithms
