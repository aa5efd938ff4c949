// Recursive doubling ("rd") and recursive halving-doubling ("rhd", Rabenseifner) allreduce.
//
// Why: a ring pays 2(n-1) message latencies, which is all that matters for small buffers.
// Recursive doubling finishes in log2(n) exchanges: at step k every rank swaps its whole partial
// result with the rank whose (folded) number differs in bit k and combines the two, so after
// log2(n) steps everybody holds the full reduction. It moves log2(n) whole buffers per rank, so it
// only pays for small messages. Rabenseifner's variant keeps the 2 log2(n) latency count of trees
// but moves only 2(n-1)/n of the buffer like a ring: a reduce-scatter by recursive halving (each
// step a rank keeps half of its current range, sends the other half to its partner and folds in
// the partner's copy of the kept half) followed by an allgather by recursive doubling (the owned
// ranges double every step). It suits medium buffers; it does not pipeline like the ring does.
//
// Non-powers of two: with p the largest power of two <= n and rem = n - p, the first 2*rem ranks
// fold in pairs before the exchanges (even rank 2i sends its input to 2i+1, which combines them
// and takes part as rank i) and unfold after (2i+1 sends 2i the final result). The other ranks
// take part as rank - rem. That costs two extra message steps, but keeps the schedule a hypercube.
//
// Identical bits everywhere: floating-point reduction is not associative, so every combination is
// done lower (folded) rank first on both sides of an exchange: after each step both partners hold
// op(lower group's value, upper group's value) computed from the same operands in the same order,
// hence the same bits. In rhd every segment's final value is computed by one rank and copied.
// kAvg divides once, at the end of the reduction, before the result is copied to anyone.
//
// Written in pairwise exchanges (PairExchange, fan_primitives.h): every step is carried out at
// once. rd's step is ExchangeReduce(partner, current -> partner, recvbuf <- lower op upper): the
// message lands in a scratch slot through Connection::SendRecv (on shm a line into the ring and a
// spin, no requests: most of a small allreduce) and is reduced after, since the send reads the
// buffer the reduction writes. rhd's halving step is ExchangeReduce too, over disjoint halves, so
// over a link that lands in place the kept half is reduced as it lands (ReduceSink); its
// allgather steps are plain Exchanges. The fold is an ExchangeReduce with nothing to send, the
// unfold an Exchange with nothing to receive.
//
// Tags: message index 0 is the fold, 1 + step for the exchanges (rhd numbers its allgather steps
// after its reduce-scatter steps), kUnfoldIndex the unfold; both ends derive them from the same
// step counter. Zero-byte ranges (count < p) are skipped by both ends alike.
#include "algorithms/allreduce_recursive.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"
#include "algorithms/reduce_sink.h"

namespace braid::algorithms {
namespace {

constexpr uint64_t kFoldIndex = 0;
constexpr uint64_t kUnfoldIndex = 0xFFFFFF;

// Pairs the first 2*rem ranks so that p = 2^k ranks remain.
struct Folding {
  int p = 1;
  int rem = 0;
  int folded_rank = -1;  // this rank's number among the p, or -1 if it sits out

  Folding(int rank, int n) {
    p = cost::FloorPow2(n);
    rem = n - p;
    if (rank < 2 * rem) {
      folded_rank = rank % 2 == 1 ? rank / 2 : -1;
    } else {
      folded_rank = rank - rem;
    }
  }
  int RealRank(int folded) const { return folded < rem ? 2 * folded + 1 : folded + rem; }
  // Whether this rank receives a neighbour's whole input in the fold.
  bool FoldsIn(int rank) const { return rank < 2 * rem && folded_rank >= 0; }
};

// The shared frame of both algorithms: FoldIn, the exchanges on the p remaining ranks, FoldOut.
// FoldIn returns where this rank's value to reduce is (sendbuf, or recvbuf once the neighbour's
// input is folded in), or null for a rank that sits out: it has handed its input over and got
// the result back.
[[gnu::always_inline]] inline const void* FoldIn(const CollectiveContext& ctx,
                                                 const Folding& folding, PairExchange& prims,
                                                 const void* sendbuf, void* recvbuf, Span all) {
  if (ctx.rank >= 2 * folding.rem) return sendbuf;
  if (folding.folded_rank < 0) {
    prims.Exchange(ctx.rank + 1, kFoldIndex, sendbuf, all, nullptr, Span{});
    prims.Exchange(ctx.rank + 1, kUnfoldIndex, nullptr, Span{}, recvbuf, all);
    return nullptr;
  }
  prims.ExchangeReduce(ctx.rank - 1, kFoldIndex, nullptr, Span{}, recvbuf, sendbuf, all,
                       /*peer_first=*/true, /*complete=*/false);  // the lower rank's input first
  return recvbuf;
}

// Hands the result to the neighbour that sat out.
[[gnu::always_inline]] inline void FoldOut(const CollectiveContext& ctx, const Folding& folding,
                                           PairExchange& prims, void* recvbuf, Span all) {
  if (ctx.rank < 2 * folding.rem) {
    prims.Exchange(ctx.rank - 1, kUnfoldIndex, recvbuf, all, nullptr, Span{});
  }
}

}  // namespace

Status RecursiveDoublingAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                                  size_t count, DataType type, ReduceOp op) {
  return RunRecursiveDoublingAllReduce(
      ctx, CollectiveArgs{Collective::kAllReduce, sendbuf, recvbuf, count, type, op});
}

// The algorithm works on the registry's CollectiveArgs as they come (errors quote them), so the
// per-call path builds no copy (a 2-rank 8-byte allreduce is one exchange: every instruction of
// set-up shows).
Status RunRecursiveDoublingAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t count = args.count;
  const void* const sendbuf = args.sendbuf;
  void* const recvbuf = args.recvbuf;
  if (count == 0) return Status::Ok();
  if (ctx.size == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * DataTypeSize(args.type));
    return Status::Ok();  // an average over one rank is the value itself
  }
  PairExchange::Options options;
  options.slot_elems = count;  // each step receives the whole buffer
  PairExchange prims(ctx, args, "rd", options);
  const Folding folding(ctx.rank, ctx.size);
  const Span all{0, count};
  const void* current = FoldIn(ctx, folding, prims, sendbuf, recvbuf, all);
  if (current == nullptr) return prims.Finish();
  const int me = folding.folded_rank;
  uint64_t step = 1;
  for (int mask = 1; mask < folding.p && prims.ok(); mask <<= 1, ++step) {
    const int partner = me ^ mask;
    prims.ExchangeReduce(folding.RealRank(partner), step, current, all, recvbuf, current, all,
                         /*peer_first=*/partner < me, /*complete=*/2 * mask >= folding.p);
    current = recvbuf;
  }
  FoldOut(ctx, folding, prims, recvbuf, all);
  return prims.Finish();
}

Status RecursiveHalvingDoublingAllReduce(const CollectiveContext& ctx, const void* sendbuf,
                                         void* recvbuf, size_t count, DataType type, ReduceOp op) {
  if (count == 0) return Status::Ok();
  if (ctx.size == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * DataTypeSize(type));
    return Status::Ok();
  }
  const Folding folding(ctx.rank, ctx.size);
  const int p = folding.p;
  // Segment s of p: [offset(s), offset(s+1)), sizes differing by at most one element.
  auto offset = [&](int s) { return s * (count / p) + std::min<size_t>(s, count % p); };
  auto range = [&](int lo, int hi) { return Span{offset(lo), offset(hi) - offset(lo)}; };
  CollectiveArgs args;  // as errors name it: only the fields OperationContext reads
  args.count = count;
  args.type = type;
  args.op = op;
  PairExchange::Options options;
  // Where a message is not reduced as it lands it waits in a slot: the fold's is the whole
  // buffer, the first kept half the largest exchange after it (lower segments are the longer).
  options.slot_elems = folding.FoldsIn(ctx.rank) ? count : offset(p / 2);
  std::shared_ptr<ReduceSink> sink;  // the halving steps reduce as the message lands
  options.sink = &sink;
  PairExchange prims(ctx, args, "rhd", options);
  const void* current = FoldIn(ctx, folding, prims, sendbuf, recvbuf, Span{0, count});
  if (current == nullptr) return prims.Finish();
  const int me = folding.folded_rank;
  int lo = 0, hi = p;  // segments this rank is responsible for
  uint64_t step = 1;
  for (int mask = p / 2; mask >= 1 && prims.ok(); mask >>= 1, ++step) {
    const int partner = me ^ mask, mid = (lo + hi) / 2;
    const bool upper = (me & mask) != 0;
    const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
    // Send one half of current, keep the other reduced into recvbuf, the lower rank's data
    // first so both partners round alike; the last step completes the segment this rank owns.
    // The halves are disjoint, so the kept one may be reduced as it lands (in place, recvbuf's
    // kept half is exactly current's).
    prims.ExchangeReduce(folding.RealRank(partner), step, current,
                         upper ? range(lo, mid) : range(mid, hi), recvbuf, current,
                         range(keep_lo, keep_hi), /*peer_first=*/partner < me,
                         /*complete=*/mask == 1);
    current = recvbuf;
    lo = keep_lo;
    hi = keep_hi;
  }
  for (int mask = 1; mask < p && prims.ok(); mask <<= 1, ++step) {
    const int partner = me ^ mask;
    const bool upper = (me & mask) != 0;
    const int other_lo = upper ? lo - mask : hi, other_hi = upper ? lo : hi + mask;
    prims.Exchange(folding.RealRank(partner), step, recvbuf, range(lo, hi), recvbuf,
                   range(other_lo, other_hi));
    lo = std::min(lo, other_lo);
    hi = std::max(hi, other_hi);
  }
  FoldOut(ctx, folding, prims, recvbuf, Span{0, count});
  return prims.Finish();
}

Status RunRecursiveHalvingDoublingAllReduce(const CollectiveContext& ctx,
                                            const CollectiveArgs& args) {
  return RecursiveHalvingDoublingAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type,
                                           args.op);
}

namespace {

// Fold and unfold: two one-way whole-buffer messages and one reduction, when n is not a power of 2.
double FoldCost(const LinkModel& link, int n, double b) {
  if (n == cost::FloorPow2(n)) return 0;
  return 2 * (link.latency_us + link.message_us + cost::Transfer(link, b)) +
         cost::ReduceWhole(link, n, b, b);
}

}  // namespace

// log2(p) exchanges of the whole buffer, each followed by a whole-buffer reduction; an exchange
// with a partner on another host moves the whole buffer of every rank of the host through its
// link (cost::LinkSharers), one with a partner on the same host costs that host's step latency
// (cost::StepLatency).
double RecursiveDoublingAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const int p = cost::FloorPow2(n), steps = cost::CeilLog2(p);
  double moved = 0, latency = 0;
  for (int mask = 1; mask < p; mask <<= 1) {
    moved += b * cost::LinkSharers(link, mask);
    latency += cost::StepLatency(link, mask);
  }
  return FoldCost(link, n, b) + cost::Transfer(link, moved) + latency +
         steps * (link.message_us + cost::ReduceWhole(link, n, b, b));
}

// 2 log2(p) exchanges moving 2(p-1)/p of the buffer in all and reducing (p-1)/p of it; the
// halving steps reduce as the message lands where the link lands it in place (rd cannot: its
// send reads the buffer the reduction would write).
double RecursiveHalvingDoublingAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const int p = cost::FloorPow2(n);
  const double share = static_cast<double>(p - 1) / p * b;
  // Halving from the farthest partner (distance p/2, half the buffer) to the nearest: where the
  // far ones are on other hosts, every rank of a host sends its half through the host's link.
  double moved = 0, half = b, latency = 0;
  for (int mask = p / 2; mask >= 1; mask >>= 1) {
    half /= 2;
    moved += half * cost::LinkSharers(link, mask);
    latency += cost::StepLatency(link, mask);
  }
  return FoldCost(link, n, b) + 2 * (latency + cost::CeilLog2(p) * link.message_us) +
         2 * cost::Transfer(link, moved) + cost::ReduceWhileReceiving(link, n, b, share);
}

}  // namespace braid::algorithms
