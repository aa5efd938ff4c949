// Pairwise all-to-all.
//
// Why pairwise: each rank has a distinct block for every other rank, so n-1 messages leave and
// n-1 arrive per rank whatever the algorithm; what matters is that they do not all converge on
// one receiver at once. In round k (1..n-1) rank r sends its block for (r+k) mod n and receives
// the block of (r-k) mod n: each round is a permutation, so every rank sends one message and
// receives one, no receiver is oversubscribed, and the rounds together move (n-1)/n of the buffer
// per rank, the least possible. A few rounds (kWindow) are kept in flight so one round's latency
// hides behind the next; a round's receive is posted before its send so data lands in place.
//
// Out of place: a round's message is the whole block, read from sendbuf and received straight
// into recvbuf; the own block is a local copy. No scratch. (TCP streams a large message as well
// as many chunks, so blocks are not cut.)
//
// In place (sendbuf == recvbuf): the block received from r-k in round k overwrites the block for
// r-k, which leaves only in round n-k, so outgoing data is staged through scratch first. All-to-
// all works element by element within blocks, so "slice" j, the elements [j*s, (j+1)*s) of every
// block, is an independent all-to-all of s elements: a slice of all n blocks is copied to
// scratch, sent from there and received into place, then the next slice follows. s is
// chunk_bytes per block, lowered so that n*s stays within kMaxScratchBytes: scratch is bounded
// however large the blocks are.
//
// Written in a FanRound (fan_primitives.h): each round is a pairwise exchange, a Recv from
// (r-k) mod n and a Send to (r+k) mod n posted together; kWindow rounds are posted ahead, and
// round k+kWindow is posted once round k's receive and send are done (WaitOldest), a sliding
// window. Every round is waited for before the next slice restages scratch.
// Tags: message (slice j, round k) is number j*(n-1) + k-1 on both sides.
#include "algorithms/alltoall_pairwise.h"

#include <algorithm>
#include <cstring>

#include "algorithms/fan_primitives.h"

namespace braid::algorithms {
namespace {

constexpr size_t kWindow = 4;                          // rounds in flight
constexpr size_t kMaxScratchBytes = size_t{32} << 20;  // in-place staging, all blocks

}  // namespace

Status PairwiseAllToAll(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const size_t elem = DataTypeSize(args.type);
  const size_t count = args.count;
  const size_t block = count * elem;
  const int n = ctx.size;
  const int r = ctx.rank;
  if (count == 0) return Status::Ok();
  const char* in = static_cast<const char*>(args.sendbuf);
  char* out = static_cast<char*>(args.recvbuf);
  const bool in_place = args.sendbuf == args.recvbuf;
  if (!in_place) std::memcpy(out + r * block, in + r * block, block);
  if (n == 1) return Status::Ok();

  size_t slice_elems = count;
  char* staging = nullptr;
  if (in_place) {
    size_t per_block = std::min(ctx.chunk_bytes, kMaxScratchBytes / n);
    slice_elems = std::min(count, std::max<size_t>(1, per_block / elem));
    staging = static_cast<char*>(ctx.scratch(static_cast<size_t>(n) * slice_elems * elem));
  }
  const size_t slices = (count + slice_elems - 1) / slice_elems;
  const size_t rounds = static_cast<size_t>(n - 1);

  FanRound round(ctx, args, "pairwise");
  for (size_t j = 0; j < slices; ++j) {
    const size_t first = j * slice_elems;
    const size_t len = std::min(slice_elems, count - first);
    if (in_place) {
      for (int b = 0; b < n; ++b) {
        if (b != r) {
          std::memcpy(staging + b * slice_elems * elem, out + b * block + first * elem, len * elem);
        }
      }
    }
    // Round k: receive the block of r-k in place, send the block for r+k (from staging in place).
    auto post = [&](size_t k) {
      const size_t to = (r + k) % n, from = (r + n - k) % n;
      const uint64_t message = j * rounds + k - 1;
      round.Recv(static_cast<int>(from), message, out, Span{from * count + first, len});
      if (in_place) {
        round.Send(static_cast<int>(to), message, staging, Span{to * slice_elems, len});
      } else {
        round.Send(static_cast<int>(to), message, in, Span{to * count + first, len});
      }
    };
    for (size_t k = 1; k <= std::min(kWindow, rounds); ++k) post(k);
    for (size_t k = 1; k <= rounds; ++k) {
      BRAID_RETURN_IF_ERROR(round.WaitOldest());
      if (k + kWindow <= rounds) post(k + kWindow);
    }
  }
  return Status::Ok();
}

// (n-1)·α + (n-1)/n·bytes·β: n-1 rounds, each moving one block each way over every rank's link.
double PairwiseAllToAllCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  double moved = static_cast<double>(n - 1) / n * static_cast<double>(bytes) / 1e3;  // µs·GB/s
  return (n - 1) * link.latency_us + moved / link.bandwidth_gbps;
}

}  // namespace braid::algorithms
