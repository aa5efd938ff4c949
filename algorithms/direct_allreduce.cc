// Direct allreduce ("direct"): every rank sends its whole buffer to every other rank and reduces
// the n buffers itself.
//
// Why: recursive doubling needs log2(n) exchanges one after the other, and each waits for its
// partner to be running. With more ranks than cores (4-8 ranks on the 2-core development hosts)
// a partner is often descheduled, so each step costs a scheduling round, not a message time, and
// with ranks bound round-robin to cores (braidrun --bind-to auto) one of rd's steps always pairs
// two ranks that share a core and must hand it over. Here there is one step: a rank posts its n-1
// sends and n-1 receives at once and then only waits for data that every peer sent as soon as it
// ran. The price is n-1 copies of the buffer per rank, sent and reduced, so it only pays for
// small buffers on shared memory with shared cores.
//
// Not chosen by the selector yet (no cost function; BRAID_ALGO=allreduce:direct forces it).
// Measured on the 2-core development VM, 2026-11-24, all_reduce_perf -n 2000-3000, shared memory:
// ahead of rd up to 512 B-2 KiB at 3, 5 and 6 ranks (3 ranks 8 B: 2.5-2.7 us against rd's three
// steps 4.2-6.1; 5 ranks 7.7-8.7 against 10.3-14.3), within noise at 4 ranks, and behind from
// 4-8 KiB (5 ranks, 32 KiB: 80-105 us against 35-62). Over TCP it is behind at every size (3 ranks,
// 8 B: 33 us against 23): a loopback send delivers the message in the sender's context, so a
// fan-out of n-1 sends costs the sender n-1 deliveries. Pricing both effects needs a fan-out term
// in the link model (per further message in flight, and per byte taken in from n-1 peers at once),
// which is not measured yet; with the alpha-beta terms alone the model would put the shared-memory
// crossover near 160 KB and pick it over TCP, both wrong.
//
// Identical bits everywhere: every rank combines the n contributions in rank order,
// ((b0 op b1) op b2) ... op b(n-1), from the same operands, so floating-point results agree to
// the bit. kAvg divides once at the end.
//
// Buffers: the n-1 peers' contributions land in scratch, one slot per peer. In place, this rank's
// own contribution is copied to scratch before anything writes recvbuf (the first reduction writes
// recvbuf while later ones still need the own contribution). Sends are waited for before recvbuf
// is written, since a transport may read sendbuf (== recvbuf in place) until the send completes.
//
// Tags: the only message of each pair is number 0.
#include "algorithms/direct_allreduce.h"

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/reduce.h"

namespace braid::algorithms {
namespace {

std::string Describe(const CollectiveContext& ctx, size_t count, DataType type, ReduceOp op) {
  return "rank " + std::to_string(ctx.rank) + ": allreduce #" + std::to_string(ctx.sequence) +
         " (" + std::to_string(count) + " x " + DataTypeName(type) + ", " + ReduceOpName(op) +
         ", direct)";
}

}  // namespace

Status DirectAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                       size_t count, DataType type, ReduceOp op) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t bytes = count * DataTypeSize(type);
  if (count == 0) return Status::Ok();
  if (n == 1) {
    if (recvbuf != sendbuf) std::memcpy(recvbuf, sendbuf, bytes);
    return Status::Ok();  // an average over one rank is the value itself
  }
  const bool in_place = sendbuf == recvbuf;
  // Slot p holds rank p's contribution (slot `rank` only in place).
  char* scratch = static_cast<char*>(ctx.scratch(static_cast<size_t>(n) * bytes));
  auto slot = [&](int p) { return scratch + static_cast<size_t>(p) * bytes; };
  const uint64_t tag = MessageTag(ctx.sequence, 0);

  // Peers in the order rank+1, rank+2, ...: every rank starts with a different peer, so the first
  // messages do not all converge on rank 0.
  std::vector<transport::RequestPtr> sends(n), receives(n);
  for (int k = 1; k < n; ++k) {
    const int peer = (rank + k) % n;
    auto connection = ctx.connection(peer);
    if (!connection.ok()) return connection.status().WithContext(Describe(ctx, count, type, op));
    sends[peer] = connection.value()->PostSend(sendbuf, bytes, tag);
    receives[peer] = connection.value()->PostRecv(slot(peer), bytes, tag);
  }
  auto wait_all = [&](const std::vector<transport::RequestPtr>& requests,
                      const char* doing) -> Status {
    for (int k = 1; k < n; ++k) {
      const int peer = (rank + k) % n;
      Status status = requests[peer]->Wait(ctx.deadline);
      if (!status.ok()) {
        return status.WithContext(Describe(ctx, count, type, op) + ": " + doing + " rank " +
                                  std::to_string(peer));
      }
    }
    return Status::Ok();
  };
  BRAID_RETURN_IF_ERROR(wait_all(receives, "receiving from"));
  BRAID_RETURN_IF_ERROR(wait_all(sends, "sending to"));

  if (in_place) std::memcpy(slot(rank), sendbuf, bytes);
  auto contribution = [&](int p) -> const void* {
    return p == rank && !in_place ? sendbuf : slot(p);
  };
  kernels::ReduceInto(type, op, recvbuf, contribution(0), contribution(1), count);
  for (int p = 2; p < n; ++p) {
    kernels::ReduceInto(type, op, recvbuf, recvbuf, contribution(p), count);
  }
  if (op == ReduceOp::kAvg) kernels::DivideInPlace(type, recvbuf, count, n);
  return Status::Ok();
}

Status RunDirectAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  return DirectAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op);
}

}  // namespace braid::algorithms
