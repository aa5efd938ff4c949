// All-to-all by single-copy reads ("read").
//
// Why: the pairwise exchange sends every block through the transport (two copies through a
// shared-memory ring) in n-1 rounds, each waiting for that round's partner. Here every rank
// offers its whole sendbuf to every peer, and each rank copies block `rank` of each peer's
// sendbuf straight into block `peer` of its recvbuf (peer_reads.h): one copy per block, one
// round.
//
// In place (sendbuf == recvbuf) a rank would overwrite its blocks with what it reads while its
// peers still read them, so it reads into scratch (past the round's control words, peer_reads.h)
// and copies the blocks into place once every peer answered: one more copy of (n-1)/n of the
// buffer.
#include <cstring>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/peer_reads.h"
#include "algorithms/read_family.h"

namespace braid::algorithms {

Status ReadAllToAll(const CollectiveContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size, rank = ctx.rank;
  const size_t block = args.count * DataTypeSize(args.type);
  if (block == 0) return Status::Ok();
  const bool in_place = args.sendbuf == args.recvbuf;
  const char* in = static_cast<const char*>(args.sendbuf);
  char* out = static_cast<char*>(args.recvbuf);
  const size_t own = static_cast<size_t>(rank) * block;
  auto place_own = [&] {
    if (!in_place) std::memcpy(out + own, in + own, block);
  };
  // In place the blocks read land in scratch (past the round's control words) and move into
  // recvbuf once every peer is done reading it.
  char* landing = out;
  if (in_place && n > 1) {
    const size_t control = PeerReadScratchBytes(n - 1, n - 1);
    landing = static_cast<char*>(ctx.scratch(control + block * static_cast<size_t>(n))) + control;
  }
  std::vector<PeerReader> readers;
  std::vector<PeerRead> reads;
  for (int k = 1; k < n; ++k) {
    const int peer = (rank + k) % n;
    readers.push_back({peer, static_cast<size_t>(peer) * block, block});
    reads.push_back({peer, own, landing + static_cast<size_t>(peer) * block, block});
  }
  BRAID_RETURN_IF_ERROR(RunPeerReads(ctx, args, "read", in, block * static_cast<size_t>(n),
                                     readers, reads, place_own));
  if (in_place) {
    for (int k = 1; k < n; ++k) {
      const size_t at = static_cast<size_t>((rank + k) % n) * block;
      std::memcpy(out + at, landing + at, block);
    }
  }
  return Status::Ok();
}

// As the all-gather: n-1 offers, n-1 answers and n-1 reads of one block per rank.
double ReadAllToAllCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::PeerReadRound(link, 2 * (n - 1), n - 1, static_cast<double>(bytes) / n);
}

}  // namespace braid::algorithms
