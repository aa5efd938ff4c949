// The one formatter every algorithm puts in front of its errors (algorithms/operation_context.h).
// The expected strings are the ones each algorithm built by hand before the formatter existed,
// byte for byte: users and tests match on them, so a change here is a change visible through
// braidGetLastError.
#include "algorithms/operation_context.h"

#include <catch2/catch.hpp>
#include <string>

namespace braid::algorithms {
namespace {

CollectiveContext Context(int rank, uint64_t sequence) {
  CollectiveContext ctx;
  ctx.rank = rank;
  ctx.size = 4;
  ctx.sequence = sequence;
  return ctx;
}

CollectiveArgs Call(Collective kind, size_t count, DataType type, ReduceOp op, int root) {
  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.type = type;
  args.op = op;
  args.root = root;
  return args;
}

TEST_CASE("operation context names rank, collective, sequence, call and algorithm") {
  const CollectiveContext ctx = Context(2, 17);
  const DataType f32 = DataType::kFloat32;
  const ReduceOp sum = ReduceOp::kSum;
  // The op for reducing collectives, the root for rooted ones, nothing else.
  CHECK(OperationContext(ctx, Call(Collective::kAllReduce, 1021, f32, sum, 3), "ring") ==
        "rank 2: allreduce #17 (1021 x float, sum, ring)");
  CHECK(OperationContext(ctx, Call(Collective::kAllReduce, 8, f32, ReduceOp::kMax, 0),
                         "recursive doubling") ==
        "rank 2: allreduce #17 (8 x float, max, recursive doubling)");
  CHECK(OperationContext(ctx, Call(Collective::kReduce, 1021, f32, sum, 0), "ring") ==
        "rank 2: reduce #17 (1021 x float, sum, root 0, ring)");
  CHECK(OperationContext(ctx, Call(Collective::kBroadcast, 5, DataType::kInt32, sum, 1),
                         "binomial") == "rank 2: broadcast #17 (5 x int32, root 1, binomial)");
  CHECK(OperationContext(ctx, Call(Collective::kAllGather, 6, f32, sum, 1), "ring") ==
        "rank 2: allgather #17 (6 x float, ring)");
  CHECK(OperationContext(ctx, Call(Collective::kReduceScatter, 6, f32, ReduceOp::kAvg, 1),
                         "ring") == "rank 2: reducescatter #17 (6 x float, avg, ring)");
  // alltoall counts per peer, gather and scatter per rank.
  CHECK(OperationContext(ctx, Call(Collective::kAllToAll, 64, DataType::kInt32, sum, 1),
                         "pairwise") == "rank 2: alltoall #17 (64 x int32 per peer, pairwise)");
  CHECK(
      OperationContext(ctx, Call(Collective::kGather, 8, DataType::kFloat64, sum, 0), "binomial") ==
      "rank 2: gather #17 (8 x double per rank, root 0, binomial)");
  CHECK(OperationContext(ctx, Call(Collective::kScatter, 8, DataType::kUint8, sum, 3), "direct") ==
        "rank 2: scatter #17 (8 x uint8 per rank, root 3, direct)");
  // A barrier moves no data: no count, type, op or root.
  CHECK(OperationContext(Context(3, 2), Call(Collective::kBarrier, 9, f32, sum, 1),
                         "dissemination") == "rank 3: barrier #2 (dissemination)");
}

TEST_CASE("WithOperationContext puts the context and the peer in front of the message") {
  const CollectiveContext ctx = Context(0, 4);
  const CollectiveArgs args =
      Call(Collective::kAllReduce, 8, DataType::kFloat32, ReduceOp::kSum, 0);
  Status failed = Status::RemoteError("peer closed the connection");

  Status named = WithOperationContext(failed, ctx, args, "direct");
  CHECK(named.code() == Code::kRemoteError);
  CHECK(named.message() ==
        "rank 0: allreduce #4 (8 x float, sum, direct): peer closed the connection");

  Status with_peer = WithOperationContext(failed, ctx, args, "tree", "receiving from", 3);
  CHECK(with_peer.code() == Code::kRemoteError);
  CHECK(with_peer.message() ==
        "rank 0: allreduce #4 (8 x float, sum, tree): receiving from rank 3: peer closed the "
        "connection");

  CHECK(WithOperationContext(Status::Ok(), ctx, args, "tree", "sending to", 1).ok());
}

}  // namespace
}  // namespace braid::algorithms
