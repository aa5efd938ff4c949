// The shm transport's handshake, sent over an abstract-namespace Unix socket (SOCK_SEQPACKET,
// so every frame arrives whole or not at all).
//
// Why a handshake at all on one host: the abstract socket name is reachable by any process in the
// network namespace. The transports' one handshake (transport/handshake.h) refuses a stranger, a
// peer of another build, another job or a stale address with a logged reason before anything is
// mapped as a segment, and makes the two prove to each other that they hold the communicator's
// secret, so a process that only learned the address (any local user can list abstract names)
// cannot join.
//
// What shm adds to the handshake's envelope (the lower rank, dialer D, dials the higher rank's
// socket, acceptor L):
//   D -> L  kHello      + the segment's memfd (SCM_RIGHTS); D's process token and probe address;
//                       the segment and ring sizes
//   L -> D  kChallenge  L's process token and probe address; flags: kCanReadYou if
//                       process_vm_readv of D's probe returned D's token
//   D -> L  kProof      flags: kCanReadYou likewise for L
//   L -> D  kAccept     (or kRefuse with a reason, at any step after a frame with the magic)
// Afterwards the socket carries only one-byte doorbells, and its end-of-file says the peer is
// gone (closed its link, exited, or was killed: the kernel closes the socket in every case).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "transport/handshake.h"

namespace braid::transport::shm {

constexpr handshake::Protocol kProtocol{"shm", 0x48534842};  // "BHSH" in memory (little-endian)

constexpr uint32_t kCanReadYou = 1;  // the sender of the frame can process_vm_readv the receiver

struct HandshakeFrame {
  handshake::Envelope envelope;
  uint64_t process_token = 0;  // random per process: equal tokens (and pid) = same process
  uint64_t probe_address = 0;  // where the sender's token lives in its address space
  uint64_t segment_bytes = 0;  // kHello
  uint64_t ring_bytes = 0;     // kHello
  uint32_t flags = 0;
  uint32_t reserved = 0;
};
static_assert(offsetof(HandshakeFrame, envelope) == 0, "the envelope's prefix comes first");
static_assert(sizeof(HandshakeFrame) == 256, "handshake frame layout");
static_assert(std::is_trivially_copyable<HandshakeFrame>::value, "sent as raw bytes");

// The doorbell byte (see RingControl::want_doorbell).
constexpr char kDoorbell = 'D';
// The goodbye (docs/FAILURES.md): a rank whose transport is aborted (a failure) sends, on each
// link's socket, one packet of this byte followed by the reason's text (at most kMaxGoodbyeBytes),
// then shuts the socket down. The peer's control thread, which reads the socket for doorbells
// anyway, reports the loss as "rank P closed the link and said why: <text>" instead of a bare
// "closed its end", so a rank that aborted because of another is told apart from a rank that is
// gone, even without the store. The socket carries no data, so the data path never sees it.
constexpr char kGoodbye = 'G';
constexpr size_t kMaxGoodbyeBytes = 2048;

}  // namespace braid::transport::shm
