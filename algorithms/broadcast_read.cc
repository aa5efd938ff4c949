// Broadcast by single-copy reads ("read").
//
// Why: the chain passes the buffer down n-1 ranks, each slice handed from one to the next (two
// copies per hand-over through a shared-memory ring), and the binomial tree has the root send it
// log2(n) times. Here the root offers its buffer to every other rank, and each of them copies it
// straight into its recvbuf (peer_reads.h): one copy per rank, all at once where there are CPUs
// for them, and a non-root waits for nobody but the root's offer. The root returns once every
// rank answered, so back-to-back broadcasts do not overlap down a chain as they do on the ring.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/peer_reads.h"
#include "algorithms/read_family.h"

namespace braid::algorithms {

Status ReadBroadcast(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank, root = args.root;
  const size_t bytes = args.count * DataTypeSize(args.type);
  if (bytes == 0) return Status::Ok();
  auto place_own = [&] {
    if (rank == root && args.sendbuf != args.recvbuf) {
      std::memcpy(args.recvbuf, args.sendbuf, bytes);
    }
  };
  std::vector<PeerReader> readers;
  std::vector<PeerRead> reads;
  if (rank == root) {
    for (int k = 1; k < n; ++k) readers.push_back({(root + k) % n, 0, bytes});
  } else {
    reads.push_back({root, 0, args.recvbuf, bytes});
  }
  return RunPeerReads(ctx, args, "read", rank == root ? args.sendbuf : nullptr,
                      rank == root ? bytes : 0, readers, reads, place_own);
}

// The root sends n-1 offers; every other rank reads the buffer once and answers. Priced as the
// other rooted collectives (cost::RootedCall): the busiest rank's work, or everybody's where the
// ranks share the CPUs.
double ReadBroadcastCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const double busiest =
      std::max(cost::PeerReadRound(link, n - 1, 0, b), cost::PeerReadRound(link, 1, 1, b));
  const double all = cost::PeerReadRound(link, 2 * (n - 1), n - 1, b);
  return cost::RootedCall(link, busiest, all);
}

}  // namespace braid::algorithms
