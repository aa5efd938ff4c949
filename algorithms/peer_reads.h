// One round of single-copy reads: ranks offer a buffer of their own to some peers, and each rank
// copies what it needs straight out of the buffers offered to it
// (Connection::ReadsPeerMemory / ReadPeerMemory). The read algorithms (algorithms/read_family.h:
// all-gather, broadcast, all-to-all) are each one such round.
//
// Why a round of reads: where a collective's data already sits in its owners' buffers, a ring
// or a pairwise exchange moves every block through the transport (two copies through a
// shared-memory ring) and, on a ring, from rank to rank: n-1 hand-overs between ranks that may
// take turns on the CPUs. Here every rank copies each block it lacks once, from its owner, and
// waits on nobody but the owners' offers.
//
// The protocol, on the link between an owner o and a reader q (message indices of the
// operation's tags):
//   0  o -> q  the offer: the address and length of o's buffer (16 bytes)
//   1  q -> o  the answer, once q is done with the buffer: 0 "read", 1 "send it" (8 bytes)
//   2  o -> q  only after "send it": the bytes q needed, as an ordinary message
// o keeps its buffer unchanged until every reader answered, so it returns only after that.
// q answers "send it" where its link to o cannot read o's memory (cross-memory attach refused,
// o a thread of this process, another transport): the pair falls back to a message, the other
// pairs still read, so ranks whose links differ still agree on every message. A read that fails
// (o's buffer gone, o died) fails the operation.
//
// Posting order (it must match on both sides of every link, which carries both directions'
// roles when both ranks offer and read): every rank first posts its offers and, for each owner
// it reads from, the receive of its offer, and for each reader of its own buffer, the receive of
// its answer; then it reads (or posts the receive of the fallback message) owner by owner and
// posts each answer; then it waits for its readers' answers and posts the fallback sends asked
// for. Messages from o to q are therefore 0, 1, 2 in that order, as q posts their receives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/collective_context.h"
#include "algorithms/function_ref.h"
#include "core/base/status.h"

namespace braid::algorithms {

// What this rank reads of `peer`'s offered buffer: `bytes` at `offset`, into `destination`.
struct PeerRead {
  int peer = -1;
  size_t offset = 0;
  void* destination = nullptr;
  size_t bytes = 0;
};

// A peer that reads this rank's offered buffer, and what it reads there (for the fallback send).
struct PeerReader {
  int peer = -1;
  size_t offset = 0;
  size_t bytes = 0;
};

// The bytes at the start of the communicator's scratch (CollectiveContext::scratch) that
// RunPeerReads uses for its control words (a multiple of 64); an algorithm that needs scratch of
// its own for the round takes it past these, asking for both at once first.
size_t PeerReadScratchBytes(size_t reads, size_t readers);

// Runs the round: offers `offered` (`offered_bytes` long; read by `readers`) and carries out
// `reads` in the order given. Both sides of every pair must list each other alike (q in o's
// readers exactly when o is in q's reads, with the same offset and length), which the
// algorithms guarantee by computing both from the call's arguments. Returns once this rank's
// reads landed and every reader of its buffer answered. Errors name the operation
// (OperationContext with `algorithm`), the peer and the step; a read beyond the offer's length
// is kInternalError (the ranks disagree about the call). `meanwhile`, if given, runs once the
// offers are out and before the first read: a rank's copy of its own block into place then
// overlaps the peers' reads instead of delaying its offers. With no readers and no reads (one
// rank) it only runs `meanwhile`.
Status RunPeerReads(const CollectiveContext& ctx, const CollectiveArgs& args,
                    const char* algorithm, const void* offered, size_t offered_bytes,
                    const std::vector<PeerReader>& readers, const std::vector<PeerRead>& reads,
                    FunctionRef<void()> meanwhile = {});

}  // namespace braid::algorithms
