// The shm transport's handshake, sent over an abstract-namespace Unix socket (SOCK_SEQPACKET,
// so every frame arrives whole or not at all).
//
// Why a handshake at all on one host: the abstract socket name is reachable by any process in the
// network namespace. Every frame starts with a magic and a version, then the communicator id and
// both ranks, so a stranger, a peer of another build, another job or a stale address is refused
// with a logged reason instead of being mapped as a segment; and the two prove to each other
// that they hold the communicator's secret (transport/auth_handshake.h), so a process that only
// learned the address (any local user can list abstract names) cannot join.
//
// Exchange (the lower rank, dialer D, dials the higher rank's socket, acceptor L):
//   D -> L  kHello    + the segment's memfd (SCM_RIGHTS); its process token and probe address;
//                     nonce = D's fresh nonce (cD)
//   L -> D  kAccept   (or kRefuse with a reason) nonce = L's fresh nonce (cL), proof = L's proof
//                     (kServer); flags: kCanReadYou if process_vm_readv of the dialer's probe
//                     returned the dialer's token
//   D -> L  kConfirm  proof = D's proof (kClient); flags: kCanReadYou likewise for the acceptor
//   L -> D  kWelcome  (or kRefuse when D's proof is wrong: different secrets)
// Both proofs cover AuthContext(comm_id, D, L) and both nonces. D judges L's proof only after
// its own was judged, so a pair with different secrets is refused and logged on both sides, and
// D counts the link as up only once kWelcome arrives, so any refusal is seen at Connect.
// Afterwards the socket carries only one-byte doorbells, and its end-of-file says the peer is
// gone (closed its link, exited, or was killed: the kernel closes the socket in every case).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "transport/auth_handshake.h"

namespace braid::transport::shm {

constexpr uint32_t kHandshakeMagic = 0x48534842;  // "BHSH" in memory on little-endian hosts
// Version 2 added the challenge-response over the communicator's secret.
constexpr uint16_t kWireVersion = 2;

enum class FrameKind : uint16_t {
  kHello = 1,
  kAccept = 2,
  kConfirm = 3,
  kRefuse = 4,
  kWelcome = 5,
};

constexpr uint32_t kCanReadYou = 1;  // the sender of the frame can process_vm_readv the receiver

struct HandshakeFrame {
  uint32_t magic = kHandshakeMagic;
  uint16_t version = kWireVersion;
  uint16_t kind = static_cast<uint16_t>(FrameKind::kHello);
  uint64_t comm_id = 0;
  int32_t sender_rank = -1;
  int32_t receiver_rank = -1;
  uint64_t process_token = 0;  // random per process: equal tokens (and pid) = same process
  uint64_t probe_address = 0;  // where the sender's token lives in its address space
  uint64_t segment_bytes = 0;  // kHello
  uint64_t ring_bytes = 0;     // kHello
  uint32_t flags = 0;
  uint32_t reserved = 0;
  uint8_t nonce[auth::kAuthBytes] = {};  // kHello, kAccept
  uint8_t proof[auth::kAuthBytes] = {};  // kAccept, kConfirm
  char reason[128] = {};                 // kRefuse: why, NUL-terminated
};
// Every version starts with the fields up to the ranks, so a frame of another size is named by
// its version when it has one.
constexpr size_t kHandshakePrefixBytes = 24;
static_assert(offsetof(HandshakeFrame, process_token) == kHandshakePrefixBytes, "frame prefix");
static_assert(sizeof(HandshakeFrame) == 256, "handshake frame layout");
static_assert(std::is_trivially_copyable<HandshakeFrame>::value, "sent as raw bytes");

// The `context` both proofs of one link cover: the protocol, the communicator and who dials whom.
inline std::string AuthContext(uint64_t comm_id, int dialer, int listener) {
  return "braid-shm/2 comm=" + std::to_string(comm_id) + " dialer=" + std::to_string(dialer) +
         " listener=" + std::to_string(listener);
}

// The doorbell byte (see RingControl::want_doorbell).
constexpr char kDoorbell = 'D';

}  // namespace braid::transport::shm
