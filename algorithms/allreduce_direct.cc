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
// When the selector picks it (DirectAllReduceCost): one step's latency, then n-1 messages, copies
// and reductions per rank, each message at the link's fan-out price and all of it slowed by the
// ranks sharing a core, since none of it waits on anyone. Measured on the 2-core development VM,
// 2026-11-24, shared memory (all_reduce_perf -n 2000-3000; select_check): ahead of rd up to
// 512 B-8 KiB at 3-6 ranks (4 ranks 8 B: 3.7 us against rd's 4.3; 3 ranks 2.5-2.7 against 4.2-6.1;
// 5 ranks 7.7-8.7 against 10.3-14.3), behind from 2-8 KiB (5 ranks, 32 KiB: 80-105 us against
// 35-62). Over TCP it is behind at every size (3 ranks, 8 B: 33 us against 23; 4 ranks 51-60
// against 37-43): a loopback send delivers the message in the sender's context, so a fan-out of
// n-1 sends costs the sender n-1 deliveries; the TCP fan-out price keeps it from being picked.
// With a core per rank (2 ranks here) it is rd's single exchange, and rd keeps the tie.
//
// Identical bits everywhere: every rank combines the n contributions in rank order,
// ((b0 op b1) op b2) ... op b(n-1), from the same operands, so floating-point results agree to
// the bit. kAvg divides once at the end.
//
// Written as one FanRound (fan_primitives.h): a Send of sendbuf to every peer and a Recv from
// each into its own scratch slot, all posted at once; Wait takes the receives, then the sends
// (a transport may read sendbuf, which is recvbuf in place, until its send completes), and only
// then is recvbuf written: the n contributions are combined in rank order. In place, this rank's
// own contribution is copied to its slot first (the first reduction writes recvbuf while later
// ones still read it).
//
// Tags: the only message of each pair is number 0.
#include "algorithms/allreduce_direct.h"

#include <cstring>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/fan_primitives.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

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
  const CollectiveArgs args{Collective::kAllReduce, sendbuf, recvbuf, count, type, op};
  FanRound round(ctx, args, "direct");
  // Peers in the order rank+1, rank+2, ...: every rank starts with a different peer, so the first
  // messages do not all converge on rank 0.
  const Span all{0, count};
  for (int k = 1; k < n; ++k) {
    const int peer = (rank + k) % n;
    round.Send(peer, 0, sendbuf, all);
    round.Recv(peer, 0, slot(peer), all);
  }
  BRAID_RETURN_IF_ERROR(round.Wait());

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

// One latency, then per rank n-1 messages at the fan-out price, n-1 transfers and n-1 whole-buffer
// reductions, times the ranks sharing each core. rd's steps are priced by their latency, which
// with shared cores already is a scheduling round (DefaultLinkModel); the fit to the measured
// crossovers (4 ranks: 0.5-2 KiB; 3, 5 and 6 ranks: 4-8 KiB) is in docs/ALGORITHMS.md.
//
// Across hosts (m ranks on each): a rank's m-1 messages to its own host's ranks go over shared
// memory, at its fan-out price and rate (LinkModel::intra_host_*); its n-m messages to other
// hosts each cost the network's fan-out price, and the host's link carries all m ranks' n-m
// buffers, m(n-m) in all (not multiplied by the ranks sharing a core: the link's time, not the
// CPUs'). Why apart: priced as n-1 messages at one fan-out price, the network's per-message cost
// came from loopback (the built-in tcp entry) while a message between the namespace hosts
// measured several times that, and the model picked direct at 8 B where rd was 1.5-6x faster
// (docs/SCALING.md); bench/calibrate --across-hosts measures tcp.fan_out_us between hosts.
double DirectAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const double reduce = (n - 1) * cost::ReduceWhole(link, n, b, b);
  const int m = link.ranks_per_host;
  if (link.hosts <= 1 || m < 1 || m >= n) {
    return link.latency_us +
           link.ranks_per_cpu * ((n - 1) * (link.fan_out_us + cost::Transfer(link, b)) + reduce);
  }
  LinkModel inside = link;  // hierarchical.h's IntraHostModel, for the two numbers used here
  if (link.intra_host_fan_out_us > 0) inside.fan_out_us = link.intra_host_fan_out_us;
  if (link.intra_host_bandwidth_gbps > 0) inside.bandwidth_gbps = link.intra_host_bandwidth_gbps;
  const double local = (m - 1) * (inside.fan_out_us + cost::Transfer(inside, b));
  const double remote = (n - m) * link.fan_out_us;
  return link.latency_us + link.ranks_per_cpu * (local + remote + reduce) +
         cost::Transfer(link, static_cast<double>(m) * (n - m) * b);
}

}  // namespace braid::algorithms
