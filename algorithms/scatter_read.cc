// Scatter by single-copy reads ("read").
//
// Why: the direct scatter has the root send every block, each through a shared-memory ring (two
// copies, the root making n-1 of them). Here the root offers its sendbuf to every other rank, and
// each copies its own block straight out of it into recvbuf (peer_reads.h): one copy per block,
// made by the rank that needs it, all at once where there are CPUs for them.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/peer_reads.h"
#include "algorithms/read_family.h"

namespace braid::algorithms {

Status ReadScatter(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank, root = args.root;
  const size_t block = args.count * DataTypeSize(args.type);
  if (block == 0) return Status::Ok();
  const char* in = static_cast<const char*>(args.sendbuf);
  auto place_own = [&] {
    // In place, the root's block already sits at its offset.
    const char* own = in + static_cast<size_t>(root) * block;
    if (rank == root && args.recvbuf != own) std::memmove(args.recvbuf, own, block);
  };
  std::vector<PeerReader> readers;
  std::vector<PeerRead> reads;
  if (rank == root) {
    for (int k = 1; k < n; ++k) {
      const int peer = (root + k) % n;
      readers.push_back({peer, static_cast<size_t>(peer) * block, block});
    }
  } else {
    reads.push_back({root, static_cast<size_t>(rank) * block, args.recvbuf, block});
  }
  return RunPeerReads(ctx, args, "read", rank == root ? in : nullptr,
                      rank == root ? block * static_cast<size_t>(n) : 0, readers, reads,
                      place_own);
}

// The root makes n-1 offers; every other rank reads its block and answers. `bytes` is the
// scattered buffer. Priced by work as the other rooted collectives (cost::RootedCall).
double ReadScatterCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double block = static_cast<double>(bytes) / n;
  const double busiest = std::max(cost::PeerReadRound(link, n - 1, 0, block),
                                  cost::PeerReadRound(link, 1, 1, block));
  return cost::RootedCall(link, busiest, cost::PeerReadRound(link, 2 * (n - 1), n - 1, block));
}

}  // namespace braid::algorithms
