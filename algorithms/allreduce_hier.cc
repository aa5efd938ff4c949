// Two-level allreduce (registered as allreduce "hier"; hierarchical.h has the family's why).
//
// Shape, with m ranks on each of H hosts, this rank at place l on host h: the buffer is cut into
// m shards (the ring's segment layout: the first count % m one element longer).
//   1. reduce-scatter inside the host: local rank l ends with shard l summed over its host, in
//      recvbuf at shard l's place;
//   2. ring allreduce of shard l across hosts, in place in recvbuf, among the H ranks of place l:
//      the m places run at once, each on its own 1/m of the buffer, so a host's link carries
//      2(H-1)/H of the buffer per direction, the least any allreduce can (the flat ring sends
//      2(n-1)/n of it across);
//   3. all-gather of the shards inside the host, in place in recvbuf.
// kAvg sums in phases 1 and 2 and divides shard l by n before phase 3, once.
//
// Pipelining: a buffer of two pieces or more (kPieceBytes) runs the three phases piece by piece,
// each piece's phase 2 on a helper thread while the calling thread runs phase 1 of the next piece
// and phase 3 of the previous one, so the network and the CPUs work at once. The two threads use
// disjoint links (inside the host, across hosts), each its own part of the scratch; the
// cross-host links are made before the helper starts, so it only reads the communicator's table.
// Each thread's phases run in the same order on every rank, which keeps every link's messages in
// step (subgroup.h, "Tags").
//
// Why in place in recvbuf throughout: phase 1 writes only this rank's shard of recvbuf, from
// sendbuf (read only); phase 2 reads and writes that shard alone; phase 3 receives the other
// shards into their places. So no scratch is kept across phases, and in place (sendbuf ==
// recvbuf) phase 1 reads the other shards of a piece before anything overwrites them (its phase 3
// starts after its phase 1's Finish; pieces are disjoint).
#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/allgather_ring.h"
#include "algorithms/allreduce_ring.h"
#include "algorithms/cost_model.h"
#include "algorithms/hierarchical.h"
#include "algorithms/reduce_scatter_ring.h"
#include "algorithms/ring_blocks.h"
#include "algorithms/subgroup.h"
#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

namespace {

// A large buffer is cut into pieces of about this size (at most kMaxPieces) so that the
// cross-host phase of piece k runs on a helper thread while the calling thread reduce-scatters
// piece k+1 and all-gathers piece k-1 inside the host: the network link then carries data while
// the CPUs combine, instead of each waiting for the other (at 2 hosts x 4 ranks, 16 MiB, links at
// 1 Gbit/s, the phases one after another measured 75 MB/s against a bound of 125).
constexpr size_t kPieceBytes = size_t{2} << 20;
constexpr size_t kMaxPieces = 8;

// Piece k of `count` elements cut into `pieces` (the first count % pieces one longer), each cut
// into m shards the same way: shards[j] is local rank j's block of the piece.
std::vector<std::vector<Block>> PieceShards(size_t count, size_t pieces, size_t k, int m) {
  const size_t begin = k * (count / pieces) + std::min(k, count % pieces);
  const size_t length = count / pieces + (k < count % pieces);
  std::vector<std::vector<Block>> shards(m);
  for (int j = 0; j < m; ++j) {
    const size_t s = static_cast<size_t>(j), per = length / m, extra = length % m;
    shards[j].push_back(Block{begin + s * per + std::min(s, extra), per + (s < extra)});
  }
  return shards;
}

}  // namespace

Status HierAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args) {
  if (!SpansTwoLevels(ctx, /*needs_uniform=*/true)) {
    return RingAllReduce(ctx, args.sendbuf, args.recvbuf, args.count, args.type, args.op);
  }
  if (args.count == 0) return Status::Ok();
  const HostTopology& topology = *ctx.topology;
  const int host = topology.host_of(ctx.rank), place = topology.local_rank(ctx.rank);
  const int m = topology.max_ranks_per_host();
  const size_t count = args.count, elem = DataTypeSize(args.type);
  const size_t pieces =
      std::min({kMaxPieces, std::max<size_t>(1, count * elem / kPieceBytes), count});
  CollectiveArgs sum = args;
  if (sum.op == ReduceOp::kAvg) sum.op = ReduceOp::kSum;
  char* out = static_cast<char*>(args.recvbuf);

  // The calling thread's phases use the front of the scratch, the helper's the part after it
  // (Subgroup's reserve), so the two never share slots.
  Subgroup inside(ctx, HostGroup(topology, host));
  Subgroup across(ctx, SamePlaceGroup(topology, place), SubgroupPhaseScratch(ctx));
  auto reduce_scatter = [&](size_t k) {
    const std::vector<std::vector<Block>> shards = PieceShards(count, pieces, k, m);
    return RingReduceScatterBlocks(inside.context(), sum, "hier: reduce-scatter inside the host",
                                   args.sendbuf, shards, out, shards[place]);
  };
  auto cross = [&](size_t k) {
    const Block own = PieceShards(count, pieces, k, m)[place].front();
    char* shard = out + own.offset * elem;
    Status status = RingAllReduce(across.context(), shard, shard, own.count, args.type, sum.op);
    if (status.ok() && args.op == ReduceOp::kAvg) {
      kernels::DivideInPlace(args.type, shard, own.count, ctx.size);
    }
    return status;
  };
  auto all_gather = [&](size_t k) {
    return RingAllGatherBlocks(inside.context(), sum, "hier: all-gather inside the host", out,
                               PieceShards(count, pieces, k, m));
  };
  if (pieces == 1) {
    BRAID_RETURN_IF_ERROR(reduce_scatter(0));
    BRAID_RETURN_IF_ERROR(cross(0));
    return all_gather(0);
  }

  // Make the cross-host links here, so that the helper only reads the communicator's table of
  // links (making one is the communicator's, under its operation lock, on this thread).
  const int across_n = across.size(), across_rank = across.rank();
  for (int peer : {(across_rank + 1) % across_n, (across_rank - 1 + across_n) % across_n}) {
    BRAID_RETURN_IF_ERROR(across.context().connection(peer).status());
  }
  // Lock order: `mutex` alone. reduced / crossed count the pieces done by each thread.
  std::mutex mutex;
  std::condition_variable changed;
  size_t reduced = 0, crossed = 0;
  bool stop = false;
  Status cross_status;
  std::thread helper([&] {
    for (size_t k = 0; k < pieces; ++k) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return reduced > k || stop; });
        if (reduced <= k) return;  // the calling thread failed
      }
      Status status = cross(k);
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (status.ok()) {
          crossed = k + 1;
        } else {
          cross_status = status;
        }
      }
      changed.notify_all();
      if (!status.ok()) return;
    }
  });
  // Waits until the helper crossed piece k (false: it failed).
  auto await_crossed = [&](size_t k) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return crossed > k || !cross_status.ok(); });
    return crossed > k;
  };
  Status status;
  for (size_t k = 0; k < pieces && status.ok(); ++k) {
    status = reduce_scatter(k);
    if (!status.ok()) break;
    {
      std::lock_guard<std::mutex> lock(mutex);
      reduced = k + 1;
    }
    changed.notify_all();
    if (k > 0) status = await_crossed(k - 1) ? all_gather(k - 1) : cross_status;
  }
  if (status.ok()) status = await_crossed(pieces - 1) ? all_gather(pieces - 1) : Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  changed.notify_all();
  helper.join();
  if (!status.ok()) return status;
  return cross_status;
}

double HierAllReduceCost(const LinkModel& link, int n, size_t bytes) {
  const int hosts = link.hosts, m = link.ranks_per_host;
  if (hosts <= 1 || m <= 1 || hosts * m != n) return std::numeric_limits<double>::infinity();
  const LinkModel inside = IntraHostModel(link);
  const double b = static_cast<double>(bytes), shard = b / m;
  const double across_share = static_cast<double>(hosts - 1) / hosts;
  // The m places cross at once, so the host's link carries m shards' ring traffic: 2(H-1)/H · B.
  const double across = link.pipeline_us + 2 * (hosts - 1) * link.latency_us +
                        cost::Transfer(link, 2 * across_share * b) +
                        cost::PipelinedReduce(link, across_share * shard, shard / hosts) +
                        cost::ChunkMessages(link, 2 * (hosts - 1), shard / hosts);
  return RingReduceScatterCost(inside, m, bytes) + across + RingAllGatherCost(inside, m, bytes);
}

}  // namespace braid::algorithms
