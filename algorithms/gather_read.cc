// Gather by single-copy reads ("read").
//
// Why: the direct gather has every non-root send its block to the root, each through a
// shared-memory ring (two copies: the sender's in, the root's out). Here every non-root offers
// its sendbuf to the root, which copies each block straight into recvbuf (peer_reads.h): one
// copy per block, all made by the root, and a non-root returns once the root answered.
#include <cstring>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/peer_reads.h"
#include "algorithms/read_family.h"

namespace braid::algorithms {

Status ReadGather(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank, root = args.root;
  const size_t block = args.count * DataTypeSize(args.type);
  if (block == 0) return Status::Ok();
  char* out = static_cast<char*>(args.recvbuf);
  auto place_own = [&] {
    // In place, the root's block already sits at its offset.
    char* own = out + static_cast<size_t>(root) * block;
    if (rank == root && args.sendbuf != own) std::memmove(own, args.sendbuf, block);
  };
  std::vector<PeerReader> readers;
  std::vector<PeerRead> reads;
  if (rank == root) {
    for (int k = 1; k < n; ++k) {
      const int peer = (root + k) % n;
      reads.push_back({peer, 0, out + static_cast<size_t>(peer) * block, block});
    }
  } else {
    readers.push_back({root, 0, block});
  }
  return RunPeerReads(ctx, args, "read", rank == root ? nullptr : args.sendbuf,
                      rank == root ? 0 : block, readers, reads, place_own);
}

// The root answers n-1 offers and reads n-1 blocks; nobody else reads. `bytes` is the gathered
// buffer. Priced by work as the other rooted collectives (cost::RootedCall).
double ReadGatherCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double block = static_cast<double>(bytes) / n;
  return cost::RootedCall(link, cost::PeerReadRound(link, n - 1, n - 1, block),
                          cost::PeerReadRound(link, 2 * (n - 1), n - 1, block));
}

}  // namespace braid::algorithms
