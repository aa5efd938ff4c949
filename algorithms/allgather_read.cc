// All-gather by single-copy reads ("read").
//
// Why: the ring hands every block from rank to rank, n-1 hand-overs, each through a
// shared-memory ring (two copies). Where ranks take turns on the CPUs (4 unpinned ranks on a
// 2-CPU host, PyTorch's usual case) each hand-over waits for the next rank to be scheduled.
// Here every rank offers its sendbuf to every peer and copies each peer's block straight out of
// the peer's sendbuf into recvbuf (peer_reads.h): one copy per block, and a rank waits only for
// the offers, which every rank makes as soon as it enters the call. The owner keeps its sendbuf
// until every peer answered, which is what a rank that gets a CPU late costs the others.
//
// Order: rank r reads r+1, r+2, ... so the ranks do not all start on the same owner. The offer
// is sendbuf; in place (sendbuf is block r of recvbuf) the blocks read are the others, never the
// offered one, and out of place the rank copies its own block while the peers read.
#include <cstring>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/peer_reads.h"
#include "algorithms/read_family.h"

namespace braid::algorithms {

Status ReadAllGather(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t block = args.count * DataTypeSize(args.type);
  if (block == 0) return Status::Ok();
  char* out = static_cast<char*>(args.recvbuf);
  char* own = out + static_cast<size_t>(rank) * block;
  auto place_own = [&] {
    if (args.sendbuf != own) std::memcpy(own, args.sendbuf, block);
  };
  std::vector<PeerReader> readers;
  std::vector<PeerRead> reads;
  for (int k = 1; k < n; ++k) {
    const int peer = (rank + k) % n;
    readers.push_back({peer, 0, block});
    reads.push_back({peer, 0, out + static_cast<size_t>(peer) * block, block});
  }
  // Offered: sendbuf (in place, the own block of recvbuf, which nothing writes during the round);
  // out of place its copy into recvbuf overlaps the peers' reads.
  return RunPeerReads(ctx, args, "read", args.sendbuf, block, readers, reads, place_own);
}

// Every rank sends n-1 offers and n-1 answers and reads n-1 blocks.
double ReadAllGatherCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::PeerReadRound(link, 2 * (n - 1), n - 1, static_cast<double>(bytes) / n);
}

}  // namespace braid::algorithms
