// All-to-all by single-copy reads ("read").
//
// Why: the pairwise exchange sends every block through the transport (two copies through a
// shared-memory ring) in n-1 rounds, each waiting for that round's partner. Here every rank
// offers its whole sendbuf to every peer, and each rank copies block `rank` of each peer's
// sendbuf straight into block `peer` of its recvbuf (peer_reads.h): one copy per block, one
// round.
//
// In place (sendbuf == recvbuf) a rank overwrites its blocks with what it reads while its peers
// still read them, so it offers a copy of its sendbuf in scratch instead (past the round's
// control words, peer_reads.h), one more copy of its own buffer.
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
  const size_t whole = block * static_cast<size_t>(n);
  char* out = static_cast<char*>(args.recvbuf);
  const char* offered = static_cast<const char*>(args.sendbuf);
  const size_t own = static_cast<size_t>(rank) * block;
  if (args.sendbuf == args.recvbuf) {
    if (n == 1) return Status::Ok();
    const size_t control = PeerReadScratchBytes(n - 1, n - 1);
    char* copy = static_cast<char*>(ctx.scratch(control + whole)) + control;
    std::memcpy(copy, args.sendbuf, whole);
    offered = copy;
  } else {
    std::memcpy(out + own, offered + own, block);
    if (n == 1) return Status::Ok();
  }
  std::vector<PeerReader> readers;
  std::vector<PeerRead> reads;
  for (int k = 1; k < n; ++k) {
    const int peer = (rank + k) % n;
    readers.push_back({peer, static_cast<size_t>(peer) * block, block});
    reads.push_back({peer, own, out + static_cast<size_t>(peer) * block, block});
  }
  return RunPeerReads(ctx, args, "read", offered, whole, readers, reads);
}

// As the all-gather: n-1 offers, n-1 answers and n-1 reads of one block per rank.
double ReadAllToAllCost(const LinkModel& link, int n, size_t bytes) {
  if (n <= 1) return 0;
  return cost::PeerReadRound(link, 2 * (n - 1), n - 1, static_cast<double>(bytes) / n);
}

}  // namespace braid::algorithms
