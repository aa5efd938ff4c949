// Dissemination barrier.
//
// Why dissemination: a barrier carries no data, only the fact "everyone has arrived", so its cost
// is the number of message steps. In round k (distance d = 2^k) rank r sends an empty message to
// (r + d) mod n and waits for one from (r - d) mod n. By induction, after round k rank r has heard
// (directly or through relays) from the 2^(k+1) ranks r - (2^(k+1) - 1) .. r, so after
// ceil(log2 n) rounds it has heard from everyone: every rank leaves after all ranks entered, in
// ceil(log2 n) steps for any n (no power-of-two padding as in recursive doubling, and no root
// hot spot as in gather-then-broadcast). Each round's receive is posted before its send, and a
// round starts only once the previous round's message arrived — that wait is the barrier.
//
// Written in a FanRound (fan_primitives.h): round k posts the Recv from (r - d) mod n and the
// Send to (r + d) mod n, both of no bytes, and waits for the receive (WaitReceives) before the
// next round; the sends are waited for at the end.
// Tags: round k is message number k.
#include "algorithms/barrier_dissemination.h"

#include "algorithms/fan_primitives.h"

namespace braid::algorithms {

Status DisseminationBarrier(const CollectiveContext& ctx, const CollectiveArgs&) {
  const int n = ctx.size;
  const int r = ctx.rank;
  if (n == 1) return Status::Ok();
  CollectiveArgs barrier;  // "rank 3: barrier #2 (dissemination)", whatever the caller's args say
  barrier.kind = Collective::kBarrier;
  FanRound round(ctx, barrier, "dissemination");
  char token = 0;  // zero bytes move; transports still get a valid address
  for (int k = 0, d = 1; d < n; ++k, d <<= 1) {
    round.Recv((r - d + n) % n, k, &token, Span{0, 0});
    round.Send((r + d) % n, k, &token, Span{0, 0});
    BRAID_RETURN_IF_ERROR(round.WaitReceives());
  }
  return round.Wait();
}

// ⌈log2 n⌉·α: one empty message per round.
double DisseminationBarrierCost(const LinkModel& link, int n, size_t) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds * link.latency_us;
}

}  // namespace braid::algorithms
