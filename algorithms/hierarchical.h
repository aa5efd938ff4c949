// Two-level ("hier") algorithms: across several hosts, most of a collective's traffic stays
// inside each host, over shared memory, and only what must cross the hosts' network links does,
// as NCCL's and Horovod's hierarchical collectives do.
//
// Why: a flat ring over n ranks on H hosts sends each of its 2(n-1) steps across a host link, so
// the slowest link carries 2(n-1)/n of the buffer per direction; an allreduce only needs
// 2(H-1)/H of it to cross (docs/MULTIHOST.md: 1.75 S against 1.0 S at 2 hosts x 4 ranks). The
// two-level forms first combine (or split) the data inside each host, run the cross-host step on
// 1/m of it per rank with every local rank in parallel on its own share (m ranks per host), and
// finish inside the host again.
//
// Each runs flat ring-family algorithms in Subgroups (algorithms/subgroup.h) of the
// communicator's ranks, read from CollectiveContext::topology:
//   allreduce      reduce-scatter inside the host (shard l to local rank l), ring allreduce of
//                  shard l across hosts among the ranks of place l, all-gather inside the host.
//   reducescatter  reduce-scatter inside the host, local rank l keeping the host's partial sums
//                  of the blocks of every host's place-l rank; ring reduce-scatter of those
//                  across hosts.
//   allgather      ring all-gather across hosts among the ranks of each place, then all-gather
//                  inside the host of the blocks each local rank now holds.
//   broadcast      chain broadcast across hosts among one leader per host (the root on its host,
//                  the lowest rank elsewhere), then chain broadcast inside each host.
//   reduce         chain reduce inside each host to its leader, then across the leaders to the
//                  root.
// kAvg runs every phase as a sum and divides once, where the complete result is (integers
// truncate once, as the flat algorithms do).
//
// Where they decline: with one host, or one rank per host, there is no second level and each
// runs the flat ring family's algorithm for its collective instead (the same result). Allreduce,
// reduce-scatter and all-gather also decline where hosts run different numbers of ranks (their
// cross-host groups need a rank of every place on every host); broadcast and reduce handle
// uneven hosts. The cost functions price a declined case as infinitely slow, so the selector only
// picks "hier" where it runs as two levels; BRAID_ALGO=hier forces it anyway and then gets the
// flat ring where it declines.
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"
#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "core/base/status.h"

namespace braid::algorithms {

Status HierAllReduce(const CollectiveContext& ctx, const CollectiveArgs& args);
Status HierReduceScatter(const CollectiveContext& ctx, const CollectiveArgs& args);
Status HierAllGather(const CollectiveContext& ctx, const CollectiveArgs& args);
Status HierBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args);
Status HierReduce(const CollectiveContext& ctx, const CollectiveArgs& args);

// Costs (docs/ALGORITHMS.md, "Two-level algorithms"): the intra-host phases priced with the
// link model's intra-host numbers, the cross-host phase with the network link shared by a host's
// ranks. Infinite where the algorithm declines (one host, one rank per host, or for allreduce,
// reduce-scatter and all-gather hosts of unequal rank counts: hosts x ranks_per_host != nranks).
double HierAllReduceCost(const LinkModel& link, int nranks, size_t bytes);
double HierReduceScatterCost(const LinkModel& link, int nranks, size_t bytes);
double HierAllGatherCost(const LinkModel& link, int nranks, size_t bytes);
double HierBroadcastCost(const LinkModel& link, int nranks, size_t bytes);
double HierReduceCost(const LinkModel& link, int nranks, size_t bytes);

// Whether `ctx` spans two levels (more than one host, more than one rank on some host), and, for
// the collectives that need it, every host the same number of ranks.
bool SpansTwoLevels(const CollectiveContext& ctx, bool needs_uniform);

// `link` with its intra-host numbers (LinkModel::intra_host_*) in place of the network's: what
// the phases inside a host are priced with.
LinkModel IntraHostModel(const LinkModel& link);

}  // namespace braid::algorithms
