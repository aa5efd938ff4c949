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
// Tags: round k is message number k.
#include "algorithms/barrier_dissemination.h"

#include <string>
#include <vector>

#include "algorithms/operation_context.h"

namespace braid::algorithms {

Status DisseminationBarrier(const CollectiveContext& ctx, const CollectiveArgs&) {
  const int n = ctx.size;
  const int r = ctx.rank;
  if (n == 1) return Status::Ok();
  // "rank 3: barrier #2 (dissemination)", whatever the caller's args say besides.
  auto describe = [&] {
    CollectiveArgs barrier;
    barrier.kind = Collective::kBarrier;
    return OperationContext(ctx, barrier, "dissemination");
  };
  char token = 0;  // zero bytes move; transports still get a valid address
  std::vector<std::pair<int, transport::RequestPtr>> sends;
  for (int k = 0, d = 1; d < n; ++k, d <<= 1) {
    const int to = (r + d) % n;
    const int from = (r - d + n) % n;
    const uint64_t tag = MessageTag(ctx.sequence, k);
    auto source = ctx.connection(from);
    if (!source.ok()) return source.status().WithContext(describe());
    auto target = ctx.connection(to);
    if (!target.ok()) return target.status().WithContext(describe());
    transport::RequestPtr recv = source.value()->PostRecv(&token, 0, tag);
    sends.emplace_back(to, target.value()->PostSend(&token, 0, tag));
    Status status = recv->Wait(ctx.deadline);
    if (!status.ok()) {
      return status.WithContext(describe() + ": round " + std::to_string(k) +
                                ", waiting for rank " + std::to_string(from));
    }
  }
  for (auto& [to, request] : sends) {
    Status status = request->Wait(ctx.deadline);
    if (!status.ok())
      return status.WithContext(describe() + ": sending to rank " + std::to_string(to));
  }
  return Status::Ok();
}

// ⌈log2 n⌉·α: one empty message per round.
double DisseminationBarrierCost(const LinkModel& link, int n, size_t) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds * link.latency_us;
}

}  // namespace braid::algorithms
