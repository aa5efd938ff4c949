// The TCP transport's wire formats: the handshake that opens a connection and the header in front
// of every message. Both start with a magic so that a stranger, a peer of another build, or a
// stream that lost its framing is refused with a clear message instead of being read as data.
//
// Fields travel in host byte order: ranks of one job run the same build on the same architecture,
// and a peer of the other endianness fails the magic check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "transport/auth_handshake.h"

namespace braid::transport::tcp {

constexpr uint32_t kHandshakeMagic = 0x48545242;  // "BRTH" in memory on little-endian hosts
constexpr uint32_t kMessageMagic = 0x4d545242;    // "BRTM"
// Version 2 added the challenge-response over the communicator's secret.
constexpr uint16_t kWireVersion = 2;

// The handshake, dialer D (the lower rank) to listener L (the higher rank):
//   D -> L  kHello      nonce = D's fresh nonce (cD)
//   L -> D  kChallenge  nonce = L's fresh nonce (cL), proof = ChallengeProof(secret, kServer, ...)
//   D -> L  kProof      proof = ChallengeProof(secret, kClient, ...)
//   L -> D  kAccept     (or kRefuse when D's proof is wrong; L then closes)
// Both proofs cover AuthContext(comm_id, D, L) and both nonces (transport/auth_handshake.h), so the
// secret never travels, a captured handshake is worthless on another connection (L's nonce is
// fresh), and neither side's proof can be reflected as the other's. D checks L's proof after its
// own was judged, so a pair with different secrets is refused and logged on both sides. D counts
// the link as up only once kAccept arrives, so any refusal is seen at Connect.
enum class HandshakeKind : uint16_t {
  kHello = 1,
  kAccept = 2,
  kChallenge = 3,
  kProof = 4,
  kRefuse = 5,
};

constexpr size_t kAuthBytes = auth::kAuthBytes;

struct HandshakeFrame {
  uint32_t magic = kHandshakeMagic;
  uint16_t version = kWireVersion;
  uint16_t kind = static_cast<uint16_t>(HandshakeKind::kHello);
  uint64_t comm_id = 0;
  int32_t sender_rank = -1;
  int32_t receiver_rank = -1;
  // --- kHandshakePrefixBytes: every version starts with the fields above ---
  uint8_t nonce[kAuthBytes] = {};  // kHello, kChallenge
  uint8_t proof[kAuthBytes] = {};  // kChallenge, kProof
};
// A frame is read prefix first, so a peer of another version is named at once instead of
// waiting for bytes it will never send.
constexpr size_t kHandshakePrefixBytes = 24;
static_assert(offsetof(HandshakeFrame, nonce) == kHandshakePrefixBytes, "handshake prefix");
static_assert(sizeof(HandshakeFrame) == 88, "handshake frame layout");
static_assert(std::is_trivially_copyable<HandshakeFrame>::value, "sent as raw bytes");

// The `context` both proofs of one link cover: the protocol, the communicator and who dials whom.
inline std::string AuthContext(uint64_t comm_id, int dialer, int listener) {
  return "braid-tcp/2 comm=" + std::to_string(comm_id) + " dialer=" + std::to_string(dialer) +
         " listener=" + std::to_string(listener);
}

// In front of every message; the payload (`bytes` bytes) follows immediately.
struct MessageHeader {
  uint32_t magic = kMessageMagic;
  uint32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(MessageHeader) == 24, "message header layout");
static_assert(std::is_trivially_copyable<MessageHeader>::value, "sent as raw bytes");

}  // namespace braid::transport::tcp
