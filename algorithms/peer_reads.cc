// One round of single-copy reads (see peer_reads.h for the protocol and why).
#include "algorithms/peer_reads.h"

#include <string>

#include "algorithms/operation_context.h"
#include "algorithms/tag_layout.h"
#include "core/base/logging.h"

namespace braid::algorithms {
namespace {

// The message indices of the protocol (peer_reads.h).
constexpr uint64_t kOfferMessage = 0;
constexpr uint64_t kAnswerMessage = 1;
constexpr uint64_t kFallbackMessage = 2;

constexpr uint64_t kAnswerRead = 0;
constexpr uint64_t kAnswerSendIt = 1;

struct Offer {
  uint64_t address;
  uint64_t bytes;
};

// The control words live in the communicator's scratch rather than on this stack: a failed
// operation returns with its posts pending until the communicator breaks its links, and their
// buffers must outlive it (transport/connection.h).
struct Control {
  Offer mine;
  Offer* offers;      // one per read: the owner's offer
  uint64_t* answers;  // one per read: this rank's answer to the owner
  uint64_t* heard;    // one per reader: its answer
};

Control ControlIn(const CollectiveContext& ctx, size_t reads, size_t readers) {
  char* base = static_cast<char*>(ctx.scratch(PeerReadScratchBytes(reads, readers)));
  Control control{};
  control.offers = reinterpret_cast<Offer*>(base + sizeof(Offer));
  control.answers = reinterpret_cast<uint64_t*>(base + sizeof(Offer) * (1 + reads));
  control.heard = control.answers + reads;
  return control;
}

struct Posted {
  transport::RequestPtr request;
  int peer;
  const char* doing;
};

}  // namespace

size_t PeerReadScratchBytes(size_t reads, size_t readers) {
  const size_t bytes = sizeof(Offer) * (1 + reads) + sizeof(uint64_t) * (reads + readers);
  return (bytes + 63) / 64 * 64;
}

Status RunPeerReads(const CollectiveContext& ctx, const CollectiveArgs& args,
                    const char* algorithm, const void* offered, size_t offered_bytes,
                    const std::vector<PeerReader>& readers, const std::vector<PeerRead>& reads,
                    FunctionRef<void()> meanwhile) {
  if (readers.empty() && reads.empty()) {  // one rank: nothing to offer or read
    if (meanwhile) meanwhile();
    return Status::Ok();
  }
  auto fail = [&](const Status& status, const char* doing, int peer) {
    return WithOperationContext(status, ctx, args, algorithm, doing, peer);
  };
  auto link = [&](int peer) { return ctx.connection(peer); };
  auto tag = [&](uint64_t message) { return MessageTag(ctx.sequence, message); };
  Control control = ControlIn(ctx, reads.size(), readers.size());
  control.mine = Offer{reinterpret_cast<uint64_t>(offered), offered_bytes};

  std::vector<Posted> sends;
  sends.reserve(2 * (readers.size() + reads.size()));
  std::vector<transport::RequestPtr> offers_in(reads.size()), answers_in(readers.size());
  std::vector<transport::Connection*> owners(reads.size()), readers_of(readers.size());

  // 1. Offers out, and the receives of the offers and answers this rank will get.
  for (size_t i = 0; i < readers.size(); ++i) {
    auto connection = link(readers[i].peer);
    if (!connection.ok()) return fail(connection.status(), "connecting to", readers[i].peer);
    readers_of[i] = connection.value();
    sends.push_back({readers_of[i]->PostSend(&control.mine, sizeof(Offer), tag(kOfferMessage)),
                     readers[i].peer, "offering its buffer to"});
  }
  for (size_t i = 0; i < reads.size(); ++i) {
    auto connection = link(reads[i].peer);
    if (!connection.ok()) return fail(connection.status(), "connecting to", reads[i].peer);
    owners[i] = connection.value();
    offers_in[i] = owners[i]->PostRecv(&control.offers[i], sizeof(Offer), tag(kOfferMessage));
  }
  for (size_t i = 0; i < readers.size(); ++i) {
    answers_in[i] = readers_of[i]->PostRecv(&control.heard[i], sizeof(uint64_t),
                                            tag(kAnswerMessage));
  }
  if (meanwhile) meanwhile();

  // 2. Reads, owner by owner as the offers come (whichever has come first: where ranks take turns
  // on the CPUs an owner that is not running yet must not hold up the reads of those that are);
  // a link that cannot read asks for a message.
  std::vector<Posted> fallbacks_in;
  std::vector<bool> done(reads.size(), false);
  size_t next = 0;  // reads[next] is the oldest not done
  for (size_t left = reads.size(); left > 0; --left) {
    size_t i = next;
    for (size_t j = next; j < reads.size(); ++j) {
      if (!done[j] && offers_in[j]->Test()) {
        i = j;
        break;
      }
    }
    done[i] = true;
    while (next < reads.size() && done[next]) ++next;
    const PeerRead& read = reads[i];
    Status status = offers_in[i]->Wait(ctx.deadline);
    if (!status.ok()) return fail(status, "receiving the offer of", read.peer);
    const Offer& offer = control.offers[i];
    if (read.offset > offer.bytes || read.bytes > offer.bytes - read.offset) {
      return fail(Status::Internal("it offered " + std::to_string(offer.bytes) +
                                   " bytes and this rank needs " + std::to_string(read.bytes) +
                                   " at offset " + std::to_string(read.offset) +
                                   ": the ranks disagree about the call"),
                  "reading the buffer of", read.peer);
    }
    if (owners[i]->ReadsPeerMemory()) {
      status = owners[i]->ReadPeerMemory(offer.address + read.offset, read.destination,
                                         read.bytes);
      if (!status.ok()) return fail(status, "reading the buffer of", read.peer);
      control.answers[i] = kAnswerRead;
    } else {
      BRAID_LOG_TO(kTrace, kColl, CommunicatorRank(ctx, ctx.rank))
          << algorithm << ": this link cannot read the memory of rank "
          << CommunicatorRank(ctx, read.peer) << "; asking it for a message";
      fallbacks_in.push_back({owners[i]->PostRecv(read.destination, read.bytes,
                                                  tag(kFallbackMessage)),
                              read.peer, "receiving (no single-copy read) from"});
      control.answers[i] = kAnswerSendIt;
    }
    sends.push_back({owners[i]->PostSend(&control.answers[i], sizeof(uint64_t),
                                         tag(kAnswerMessage)),
                     read.peer, "answering the offer of"});
  }

  // 3. The readers' answers: the buffer may change once all came; send where asked to.
  for (size_t i = 0; i < readers.size(); ++i) {
    const PeerReader& reader = readers[i];
    Status status = answers_in[i]->Wait(ctx.deadline);
    if (!status.ok()) return fail(status, "waiting for the answer of", reader.peer);
    if (control.heard[i] == kAnswerSendIt) {
      sends.push_back({readers_of[i]->PostSend(static_cast<const char*>(offered) + reader.offset,
                                               reader.bytes, tag(kFallbackMessage)),
                       reader.peer, "sending (no single-copy read) to"});
    } else if (control.heard[i] != kAnswerRead) {
      return fail(Status::Internal("its answer to this rank's offer is " +
                                   std::to_string(control.heard[i]) +
                                   ", neither 'read' (0) nor 'send it' (1)"),
                  "waiting for the answer of", reader.peer);
    }
  }
  for (Posted& posted : fallbacks_in) {
    Status status = posted.request->Wait(ctx.deadline);
    if (!status.ok()) return fail(status, posted.doing, posted.peer);
  }
  for (Posted& posted : sends) {
    Status status = posted.request->Wait(ctx.deadline);
    if (!status.ok()) return fail(status, posted.doing, posted.peer);
  }
  return Status::Ok();
}

}  // namespace braid::algorithms
