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
// Tags: message index 0 is the fold, 1 + step for the exchanges (rhd numbers its allgather steps
// after its reduce-scatter steps), kUnfoldIndex the unfold; both ends derive them from the same
// step counter. Zero-byte ranges (count < p) are skipped by both ends alike.
#include "algorithms/allreduce_recursive.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "algorithms/cost_model.h"
#include "algorithms/operation_context.h"
#include "algorithms/reduce_sink.h"
#include "kernels/cpu/reduce.h"

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
};

class Exchanger {
 public:
  Exchanger(const CollectiveContext& ctx, size_t count, DataType type, ReduceOp op,
            const char* algorithm)
      : ctx_(ctx), count_(count), type_(type), op_(op), algorithm_(algorithm) {}

  // Sends `send_bytes` from `send` to `peer` and receives `recv_bytes` into `recv` from it, both
  // as message `index`; returns when both completed. Zero-byte halves are skipped.
  Status Exchange(int peer, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                  uint64_t index) {
    BRAID_ASSIGN_OR_RETURN(transport::Connection * connection, ctx_.connection(peer));
    transport::Connection::Half failed = transport::Connection::Half::kReceive;
    Status status = connection->SendRecv(send, send_bytes, recv, recv_bytes,
                                         MessageTag(ctx_.sequence, index), ctx_.deadline, &failed);
    if (status.ok()) return status;
    return Fail(status, failed == transport::Connection::Half::kSend ? "sending to" : "receiving from",
                peer);
  }

  // Exchange, but where the connection lands messages in place the message is reduced with `own`
  // into `reduced_into` as it lands (ReduceSink, lower rank first when `message_first`: one pass
  // less, overlapping the transfer) and *done is set; otherwise it lands in `recv` for the
  // caller to reduce. `sink` is the caller's, made here on first use and reused step after step
  // (each step's receive has completed before the next is posted); it is shared with the
  // connection, which keeps it while it may call it (a failed step can leave its receive pending
  // after the call returns). The caller holds it rather than this object, so that recursive
  // doubling, which never reduces as it lands, pays nothing for it.
  Status ExchangeReducing(int peer, const void* send, size_t send_bytes, void* recv,
                          size_t recv_bytes, uint64_t index, const void* own, bool message_first,
                          void* reduced_into, std::shared_ptr<ReduceSink>& sink, bool* done) {
    BRAID_ASSIGN_OR_RETURN(transport::Connection * connection, ctx_.connection(peer));
    const bool reducing = connection->LandsInPlace();
    *done = reducing;
    transport::RequestPtr recv_request, send_request;
    const uint64_t tag = MessageTag(ctx_.sequence, index);
    // The send is posted first: both partners wait for each other's message, so the time a rank
    // spends between its partner's data landing and its own send leaving is paid by the partner
    // on every step. Posting a receive costs a request allocation on most transports and can wait
    // until our data is on its way; connections keep a message that arrives first until its
    // receive is posted, so the order changes nothing on the wire.
    if (send_bytes > 0) send_request = connection->PostSend(send, send_bytes, tag);
    if (recv_bytes > 0) {
      if (reducing) {
        if (sink == nullptr) sink = std::make_shared<ReduceSink>();
        sink->Reset(reduced_into, own, type_, op_, message_first);
        recv_request = connection->PostRecvInto(recv_bytes, tag, sink);
      } else {
        recv_request = connection->PostRecv(recv, recv_bytes, tag);
      }
    }
    if (recv_request) {
      Status status = recv_request->Wait(ctx_.deadline);
      if (!status.ok()) return Fail(status, "receiving from", peer);
    }
    if (send_request) {
      Status status = send_request->Wait(ctx_.deadline);
      if (!status.ok()) return Fail(status, "sending to", peer);
    }
    return Status::Ok();
  }

 private:
  Status Fail(const Status& status, const char* what, int peer) const {
    CollectiveArgs call;  // as errors name it: only the fields OperationContext reads
    call.kind = Collective::kAllReduce;
    call.count = count_;
    call.type = type_;
    call.op = op_;
    return WithOperationContext(status, ctx_, call, algorithm_, what, peer);
  }

  const CollectiveContext& ctx_;
  size_t count_;
  DataType type_;
  ReduceOp op_;
  const char* algorithm_;
};

// The shared frame of both algorithms: fold, `core` on the p remaining ranks, unfold.
// `core(folding, current)` reduces `current` (sendbuf or, after a fold, recvbuf) into recvbuf,
// dividing for kAvg.
template <typename Core>
Status Folded(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf, size_t count,
              DataType type, ReduceOp op, Exchanger& exchanger, Core core) {
  const size_t bytes = count * DataTypeSize(type);
  if (count == 0) return Status::Ok();
  if (ctx.size == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, bytes);
    return Status::Ok();
  }
  const Folding folding(ctx.rank, ctx.size);
  const void* current = sendbuf;
  if (ctx.rank < 2 * folding.rem) {
    if (folding.folded_rank < 0) {
      // Hand the input to the odd neighbour; the final result comes back from it.
      BRAID_RETURN_IF_ERROR(exchanger.Exchange(ctx.rank + 1, sendbuf, bytes, nullptr, 0, kFoldIndex));
      return exchanger.Exchange(ctx.rank + 1, nullptr, 0, recvbuf, bytes, kUnfoldIndex);
    }
    void* tmp = ctx.scratch(bytes);
    BRAID_RETURN_IF_ERROR(exchanger.Exchange(ctx.rank - 1, nullptr, 0, tmp, bytes, kFoldIndex));
    kernels::ReduceInto(type, op, recvbuf, tmp, sendbuf, count);  // lower rank first
    current = recvbuf;
  }
  BRAID_RETURN_IF_ERROR(core(folding, current));
  if (ctx.rank < 2 * folding.rem) {
    return exchanger.Exchange(ctx.rank - 1, recvbuf, bytes, nullptr, 0, kUnfoldIndex);
  }
  return Status::Ok();
}

}  // namespace

Status RecursiveDoublingAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                                  size_t count, DataType type, ReduceOp op) {
  Exchanger exchanger(ctx, count, type, op, "rd");
  const size_t bytes = count * DataTypeSize(type);
  return Folded(ctx, sendbuf, recvbuf, count, type, op, exchanger,
                [&](const Folding& folding, const void* current) -> Status {
                  void* tmp = ctx.scratch(bytes);
                  const int me = folding.folded_rank;
                  uint64_t step = 1;
                  for (int mask = 1; mask < folding.p; mask <<= 1, ++step) {
                    const int partner = me ^ mask;
                    BRAID_RETURN_IF_ERROR(exchanger.Exchange(folding.RealRank(partner), current,
                                                             bytes, tmp, bytes, step));
                    if (partner < me) {
                      kernels::ReduceInto(type, op, recvbuf, tmp, current, count);
                    } else {
                      kernels::ReduceInto(type, op, recvbuf, current, tmp, count);
                    }
                    current = recvbuf;
                  }
                  if (op == ReduceOp::kAvg) kernels::DivideInPlace(type, recvbuf, count, ctx.size);
                  return Status::Ok();
                });
}

Status RecursiveHalvingDoublingAllReduce(const CollectiveContext& ctx, const void* sendbuf,
                                         void* recvbuf, size_t count, DataType type, ReduceOp op) {
  Exchanger exchanger(ctx, count, type, op, "rhd");
  const size_t elem = DataTypeSize(type);
  return Folded(
      ctx, sendbuf, recvbuf, count, type, op, exchanger,
      [&](const Folding& folding, const void* current) -> Status {
        const int p = folding.p, me = folding.folded_rank;
        // Segment s of p: [Offset(s), Offset(s+1)), sizes differing by at most one element.
        auto offset = [&](int s) {
          return s * (count / p) + std::min<size_t>(s, count % p);
        };
        const char* cur = static_cast<const char*>(current);
        char* out = static_cast<char*>(recvbuf);
        // The first kept half is the largest range ever received (lower segments are the longer).
        char* tmp = static_cast<char*>(ctx.scratch(offset(p / 2) * elem));
        uint64_t step = 1;
        int lo = 0, hi = p;  // segments this rank is responsible for
        std::shared_ptr<ReduceSink> sink;  // the halving steps' (ExchangeReducing)
        for (int mask = p / 2; mask >= 1; mask >>= 1, ++step) {
          const int partner = me ^ mask, mid = (lo + hi) / 2;
          const bool upper = (me & mask) != 0;
          const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
          const int send_lo = upper ? lo : mid, send_hi = upper ? mid : hi;
          const size_t keep = offset(keep_hi) - offset(keep_lo);
          char* target = out + offset(keep_lo) * elem;
          const char* mine = cur + offset(keep_lo) * elem;
          // The lower rank's data first, so both partners round alike. Reducing as it lands
          // writes target while our send reads the other half of cur: the halves are disjoint,
          // and in place target is exactly mine.
          bool reduced = false;
          BRAID_RETURN_IF_ERROR(exchanger.ExchangeReducing(
              folding.RealRank(partner), cur + offset(send_lo) * elem,
              (offset(send_hi) - offset(send_lo)) * elem, tmp, keep * elem, step, mine,
              partner < me, target, sink, &reduced));
          if (!reduced && partner < me) kernels::ReduceInto(type, op, target, tmp, mine, keep);
          if (!reduced && partner > me) kernels::ReduceInto(type, op, target, mine, tmp, keep);
          cur = out;
          lo = keep_lo;
          hi = keep_hi;
        }
        if (op == ReduceOp::kAvg) {
          kernels::DivideInPlace(type, out + offset(lo) * elem, offset(hi) - offset(lo), ctx.size);
        }
        for (int mask = 1; mask < p; mask <<= 1, ++step) {
          const int partner = me ^ mask;
          const bool upper = (me & mask) != 0;
          const int other_lo = upper ? lo - mask : hi, other_hi = upper ? lo : hi + mask;
          BRAID_RETURN_IF_ERROR(exchanger.Exchange(
              folding.RealRank(partner), out + offset(lo) * elem, (offset(hi) - offset(lo)) * elem,
              out + offset(other_lo) * elem, (offset(other_hi) - offset(other_lo)) * elem, step));
          lo = std::min(lo, other_lo);
          hi = std::max(hi, other_hi);
        }
        return Status::Ok();
      });
}

Status RunRecursiveDoublingAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return RecursiveDoublingAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type,
                                    args.op);
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

// log2(p) exchanges of the whole buffer, each followed by a whole-buffer reduction.
double RecursiveDoublingAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const int steps = cost::CeilLog2(cost::FloorPow2(n));
  return FoldCost(link, n, b) +
         steps * (link.latency_us + link.message_us + cost::Transfer(link, b) +
                  cost::ReduceWhole(link, n, b, b));
}

// 2 log2(p) exchanges moving 2(p-1)/p of the buffer in all and reducing (p-1)/p of it; the
// halving steps reduce as the message lands where the link lands it in place (rd cannot: its
// send reads the buffer the reduction would write).
double RecursiveHalvingDoublingAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const int p = cost::FloorPow2(n);
  const double share = static_cast<double>(p - 1) / p * b;
  return FoldCost(link, n, b) + 2 * cost::CeilLog2(p) * (link.latency_us + link.message_us) +
         2 * cost::Transfer(link, share) + cost::ReduceWhileReceiving(link, n, b, share);
}

}  // namespace braid::algorithms
