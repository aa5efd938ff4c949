// The collectives braid's *_perf programs measure, one Collective each (see perf_common.h):
// sizes and in-place offsets, bus-bandwidth factor, the braid call and the expected data, all
// as nccl-tests' src/*.cu define them (busbw factors: nccl-tests' doc/PERFORMANCE.md).
//
// In a library rather than in each *_perf.cc so the unit tests can check every one of them
// without launching ranks; each program is then a one-line main().
#pragma once

#include <vector>

#include "bench/perf_common.h"

namespace braid::bench {

const Collective& AllReduceCollective();      // all_reduce_perf      busbw = algbw * 2(n-1)/n
const Collective& AllGatherCollective();      // all_gather_perf      busbw = algbw * (n-1)/n
const Collective& BroadcastCollective();      // broadcast_perf       busbw = algbw
const Collective& ReduceCollective();         // reduce_perf          busbw = algbw
const Collective& ReduceScatterCollective();  // reduce_scatter_perf  busbw = algbw * (n-1)/n
const Collective& AllToAllCollective();       // alltoall_perf        busbw = algbw * (n-1)/n
const Collective& GatherCollective();         // gather_perf          busbw = algbw * (n-1)/n
const Collective& ScatterCollective();        // scatter_perf         busbw = algbw * (n-1)/n
const Collective& SendRecvCollective();       // sendrecv_perf        busbw = algbw

// Every collective above, in that order.
std::vector<const Collective*> AllCollectives();

}  // namespace braid::bench
