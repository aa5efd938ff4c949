// Ring allgather.
//
// Why a ring: every rank must receive the (n-1) blocks it lacks, and on a ring each rank receives
// exactly those, once, from its previous rank while sending as much to its next one: every link
// is busy at every step, so large buffers run at link bandwidth whatever the rank count. The
// price is n-1 message latencies, which small gathers feel.
//
// Shape (block b is rank b's contribution, `count` elements): at step k = 0 .. n-2 a rank sends
// block rank-k to next (its own at step 0) and receives block rank-k-1 from prev, which it
// forwards at step k+1 (except the last one received). After n-1 steps every block has visited
// every rank.
//
// Pipelining: every block is cut into chunk-sized slices and the n-1 steps run slice by slice
// (primitives.h), so a rank forwards slice s of a block while slice s+1 is arriving, and
// receives are posted ahead into recvbuf itself: no scratch, no copies.
//
// Why it is safe to receive straight into recvbuf: the blocks received are exactly the ones this
// rank does not own, and nothing reads them before they arrive (a forward reads block b only
// after the move that received it). The own block is read from sendbuf; out of place it is
// copied into recvbuf while the last receives land.
#include "algorithms/allgather_ring.h"

#include <cstring>

#include "algorithms/cost_model.h"
#include "algorithms/primitives.h"

namespace braid::algorithms {

Status RingAllGather(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t count = args.count, block_bytes = count * DataTypeSize(args.type);
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(args.sendbuf);
  char* out = static_cast<char*>(args.recvbuf);
  auto block = [&](int b) { return out + static_cast<size_t>((b % n + n) % n) * block_bytes; };
  const bool in_place = in == block(rank);
  if (n == 1) {
    if (!in_place) std::memcpy(block(rank), in, block_bytes);
    return Status::Ok();
  }

  Primitives prims(ctx, args, "ring");
  BRAID_RETURN_IF_ERROR(prims.Connect((rank - 1 + n) % n, (rank + 1) % n));
  for (size_t s = 0; s < prims.SliceCount(count) && prims.ok(); ++s) {
    const Span slice = prims.Slice(count, s);
    prims.Send(in, slice);
    for (int k = 1; k < n - 1; ++k) prims.RecvCopySend(block(rank - k), slice);
    prims.Recv(block(rank - (n - 1)), slice);
  }
  if (!in_place) std::memcpy(block(rank), in, block_bytes);
  return prims.Finish();
}

double RingAllGatherCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return (n - 1) * link.latency_us +
         cost::Transfer(link, static_cast<double>(n - 1) / n * static_cast<double>(bytes));
}

}  // namespace braid::algorithms
