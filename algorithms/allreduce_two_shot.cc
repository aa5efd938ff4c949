// Two-shot allreduce ("twoshot"): a direct reduce-scatter, then a direct all-gather.
//
// Why: with more ranks than cores (4 ranks on the 2-core development hosts) a rank makes
// progress only while it runs, and the ring and recursive halving chain every step on the step
// before: a ring's chunk passes n-1 ranks one after another in each half, rhd's second halving
// waits for its partner's first. Each link
// in such a chain is a hand-over between ranks that take turns on a core. Here nothing a rank
// sends waits on anyone: its whole reduce-scatter leaves from its own send buffer as soon as it
// runs, and its all-gather from its own reduced shard. A rank that gets a core does all the
// work it can. The bytes are the ring's (each rank sends and receives 2(n-1)/n of the buffer and
// reduces (n-1)/n of it), so with a core per rank the ring or rhd keep the tie. Measured, it wins
// where ranks are bound two to a core and not where they float (TwoShotAllReduceCost): the
// selector leaves it to BRAID_ALGO.
//
// The two rounds:
//   reduce-scatter  shard p (the p-th of n nearly equal runs of elements) is reduced by rank p.
//                   Every rank sends each peer p its shard-p elements in slices of ctx.chunk_bytes,
//                   all posted at once; it reduces its own shard slice by slice, the peers' pieces
//                   reduced as they land (ReduceSink: straight out of the shared-memory ring, no
//                   scratch), so a slice of the result stays in the cache while every peer's
//                   contribution is added to it.
//   all-gather      every rank sends its reduced shard to every peer in one message and receives
//                   theirs straight into recvbuf, all posted at once.
//
// Identical bits everywhere: each shard is computed by one rank only and copied to the others.
// The order of its operands is fixed, own first, then the peers from rank-1 down, (((own op
// b[r-1]) op b[r-2]) ...), so a run is repeatable; the receives of one slice are taken in that
// order (the later peers' pieces wait in their rings meanwhile). It is the order in which the
// peers post their sends (rank q sends to q+1 first), so the first piece a rank waits for is the
// one its sender offered first. kAvg divides the shard once, before it is sent.
//
// In place: the reduce-scatter's sends read the other shards of recvbuf, which the all-gather
// overwrites, so the all-gather is posted only after every reduce-scatter send completed; its
// own shard is read only as `own`, exactly where it is written (ReduceSink allows that).
//
// Tags: on the link to peer p, messages 0..K-1 are the K slices of shard p, message K the
// sender's reduced shard; both ends count K from shard p's length and ctx.chunk_bytes.
#include "algorithms/allreduce_two_shot.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "algorithms/fan_primitives.h"
#include "algorithms/reduce_sink.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {
namespace {

// Shard p of n over `count` elements: the first count % n shards are one element longer.
Span Shard(size_t count, int n, int p) {
  const size_t base = count / n, extra = count % n, index = static_cast<size_t>(p);
  return Span{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

size_t SliceCount(size_t elements, size_t slice_elems) {
  return (elements + slice_elems - 1) / slice_elems;
}

Span Slice(Span shard, size_t slice_elems, size_t j) {
  const size_t begin = j * slice_elems;
  return Span{shard.offset + begin, std::min(slice_elems, shard.count - begin)};
}

}  // namespace

Status TwoShotAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                        size_t count, DataType type, ReduceOp op) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t elem = DataTypeSize(type);
  if (count == 0) return Status::Ok();
  if (n == 1) {
    if (recvbuf != sendbuf) std::memcpy(recvbuf, sendbuf, count * elem);
    return Status::Ok();  // an average over one rank is the value itself
  }
  const size_t slice_elems = std::max<size_t>(1, ctx.chunk_bytes / elem);
  const CollectiveArgs args{Collective::kAllReduce, sendbuf, recvbuf, count, type, op};
  FanRound round(ctx, args, "twoshot");
  auto peer = [&](int k) { return (rank + k) % n; };

  // Reduce-scatter: every slice of every peer's shard leaves at once, slice 0 to each peer first.
  size_t most_slices = 0;
  for (int k = 1; k < n; ++k) {
    most_slices = std::max(most_slices, SliceCount(Shard(count, n, peer(k)).count, slice_elems));
  }
  for (size_t j = 0; j < most_slices; ++j) {
    for (int k = 1; k < n; ++k) {
      const Span shard = Shard(count, n, peer(k));
      if (j < SliceCount(shard.count, slice_elems)) {
        round.Send(peer(k), j, sendbuf, Slice(shard, slice_elems, j));
      }
    }
  }
  const Span mine = Shard(count, n, rank);
  const size_t my_slices = SliceCount(mine.count, slice_elems);
  auto sinks = TakeReduceSinks<1>();
  std::shared_ptr<ReduceSink> sink(sinks, &(*sinks)[0]);
  for (size_t j = 0; j < my_slices && round.ok(); ++j) {
    const Span slice = Slice(mine, slice_elems, j);
    char* dst = static_cast<char*>(recvbuf) + slice.offset * elem;
    const char* own = static_cast<const char*>(sendbuf) + slice.offset * elem;
    for (int k = 1; k < n; ++k) {
      // The first contribution combines with own; the later ones with the partial result.
      sink->Reset(dst, k == 1 ? own : dst, type, op, /*message_first=*/false);
      round.RecvInto(peer(n - k), j, slice.count * elem, sink);
      if (!round.WaitReceives().ok()) break;
    }
  }
  BRAID_RETURN_IF_ERROR(round.Wait());  // in place, the all-gather overwrites what these sent
  if (op == ReduceOp::kAvg) {
    kernels::DivideInPlace(type, static_cast<char*>(recvbuf) + mine.offset * elem, mine.count, n);
  }

  // All-gather: the reduced shard to every peer, theirs straight into recvbuf.
  for (int k = 1; k < n; ++k) {
    const int p = peer(k);
    const Span theirs = Shard(count, n, p);
    if (mine.count > 0) round.Send(p, SliceCount(theirs.count, slice_elems), recvbuf, mine);
    if (theirs.count > 0) round.Recv(p, my_slices, recvbuf, theirs);
  }
  return round.Wait();
}

Status RunTwoShotAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return TwoShotAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op);
}

// Not priced: the selector never picks it, BRAID_ALGO=allreduce:twoshot forces it. Why: what it
// wins depends on whether the ranks are bound to CPUs, which the link model does not know.
// Measured quietly on the 2-core VM (2026-11-25, all_reduce_perf, median of 3 launches, out of
// place / in place, ms): 4 ranks bound two to a core (braidrun's default), 8 MiB 4.7 / 4.3
// against rhd's 5.5 / 5.3, 16 MiB 10.6 / 10.2 against 14.6 / 13.6, level at 64 MiB; 4 unbound
// ranks (torchrun, mp.spawn) 2 MiB 1.12 / 0.78 against 0.76 / 0.48, level at 4-16 MiB, 64 MiB
// 62 / 57 against 54 / 45; 3 unbound ranks behind rhd from 8 MiB; 2 ranks with a core each
// level or behind at every size (docs/ALGORITHMS.md). A model that priced it ahead of rhd would
// have slowed the unbound jobs, PyTorch's, to speed up the bound ones.
double TwoShotAllReduceCost(const LinkModel& /*link*/, int n, size_t /*bytes*/) {
  return n <= 1 ? 0 : std::numeric_limits<double>::infinity();
}

}  // namespace braid::algorithms
