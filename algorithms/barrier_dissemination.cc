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
// Written in fan primitives (fan_primitives.h): round k is Signal((r + d) mod n) then
// Await((r - d) mod n); moves run in call order, so round k+1's signal leaves only once round k's
// arrived, while its receive is already posted (one ahead). Each pair meets in at most one round,
// so every message is number 0 of its pair.
#include "algorithms/barrier_dissemination.h"

#include "algorithms/fan_primitives.h"

namespace braid::algorithms {

Status DisseminationBarrier(const CollectiveContext& ctx, const CollectiveArgs&) {
  const int n = ctx.size;
  const int r = ctx.rank;
  if (n == 1) return Status::Ok();
  CollectiveArgs barrier;  // "rank 3: barrier #2 (dissemination)", whatever the caller's args say
  barrier.kind = Collective::kBarrier;
  FanPrimitives::Options options;
  options.window = 1;  // a round's receive is posted when the round before it has ended
  FanPrimitives prims(ctx, barrier, "dissemination", options);
  for (int d = 1; d < n && prims.ok(); d <<= 1) {
    prims.Signal((r + d) % n);
    prims.Await((r - d + n) % n);
  }
  return prims.Finish();
}

// ⌈log2 n⌉·α: one empty message per round.
double DisseminationBarrierCost(const LinkModel& link, int n, size_t) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds * link.latency_us;
}

}  // namespace braid::algorithms
