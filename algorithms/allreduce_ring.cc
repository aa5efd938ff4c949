// Ring allreduce.
//
// Why a ring: every rank sends and receives 2(n-1)/n of the buffer, the least any allreduce can
// move per rank, and every link carries traffic at every step, so large buffers run at link
// bandwidth whatever the rank count. (Small buffers pay 2(n-1) latencies; the tree family has
// trees and recursive doubling for those.)
//
// Shape: the buffer is cut into n segments, one per rank (the first count % n one element
// longer). A reduce-scatter pass of n-1 steps leaves rank r owning the full reduction of segment
// r+1: at step 0 it sends its contribution to segment r, at steps 1 .. n-2 it receives the partial
// for segment r-k, adds its contribution and forwards it, and at step n-1 it completes segment
// r+1, writes it to recvbuf (kAvg divides it there, once) and forwards it. An allgather pass of
// n-1 steps then circulates the complete segments: receive segment r+1-k into recvbuf and forward
// it, the last one without forwarding. These are NCCL's moves (send, recvReduceSend,
// recvReduceCopySend, recvCopySend, recv) over braid's primitives (primitives.h).
//
// Pipelining: each segment is cut into chunk-sized slices and the 2(n-1) steps run slice by slice,
// so a rank forwards slice s while slice s+1 is still arriving: scratch stays bounded (the
// primitives' slots hold partials) and reduction overlaps with the wire. Segments of unequal
// length give some steps an empty slice, which both ends of a link skip alike.
//
// Why it is safe to receive allgather data straight into recvbuf, even in place, while earlier
// moves may still read this rank's contribution from the same region: the complete value of a
// segment can only reach this rank after the next rank received this rank's partial for it,
// i.e. after the move that read the contribution has run and its send was transmitted.
#include "algorithms/allreduce_ring.h"

#include <algorithm>
#include <cstring>

#include "algorithms/primitives.h"

namespace braid::algorithms {

Status RingAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf, size_t count,
                     DataType type, ReduceOp op) {
  const size_t elem = DataTypeSize(type);
  if (count == 0) return Status::Ok();
  if (ctx.size == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * elem);
    return Status::Ok();  // an average over one rank is the value itself
  }

  const int n = ctx.size, rank = ctx.rank;
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  // Segment seg (any integer, taken mod n) is [offset, offset + length) of the buffer.
  auto mod = [n](int seg) { return (seg % n + n) % n; };
  auto length = [&](int seg) { return count / n + (static_cast<size_t>(mod(seg)) < count % n); };
  auto offset = [&](int seg) {
    size_t s = static_cast<size_t>(mod(seg));
    return s * (count / n) + std::min(s, count % n);
  };

  CollectiveArgs args;
  args.kind = Collective::kAllReduce;
  args.sendbuf = sendbuf;
  args.recvbuf = recvbuf;
  args.count = count;
  args.type = type;
  args.op = op;
  Primitives prims(ctx, args, "ring");
  BRAID_RETURN_IF_ERROR(prims.Connect((rank - 1 + n) % n, (rank + 1) % n));
  const size_t slices = prims.SliceCount(length(0));
  // Slice s of segment seg, as a span of the whole buffer.
  auto slice = [&](int seg, size_t s) {
    Span span = prims.Slice(length(seg), s);
    span.offset += offset(seg);
    return span;
  };
  for (size_t s = 0; s < slices && prims.ok(); ++s) {
    if (n > 2 || s == 0) prims.Send(in, slice(rank, s));
    for (int k = 1; k < n - 1; ++k) prims.RecvReduceSend(in, slice(rank - k, s));
    prims.RecvReduceCopySend(out, in, slice(rank + 1, s));
    for (int k = 1; k < n - 1; ++k) prims.RecvCopySend(out, slice(rank + 1 - k, s));
    // At 2 ranks the next slice's send goes before this slice's last receive. Moves run in call
    // order, and there the last receive is the peer's answer to this slice, so after it the send
    // waited for the slice's whole round trip and the slices went one at a time (the ring lost
    // to the tree over TCP at 1-4 MiB). It moves no message across another (a Recv sends
    // nothing), and it reads only this rank's input, which the Recv does not write. With more
    // ranks the ring already keeps every link busy, and over TCP on 2 shared cores the early send
    // made 4 ranks fall into a slow state (0.5-0.9 against 1.2 GB/s) in 3-4 launches of 8
    // instead of 1 (docs/PERFORMANCE.md).
    if (n == 2 && s + 1 < slices) prims.Send(in, slice(rank, s + 1));
    prims.Recv(out, slice(rank + 2, s));
  }
  return prims.Finish();
}

}  // namespace braid::algorithms
