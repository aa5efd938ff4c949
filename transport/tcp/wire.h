// The TCP transport's wire formats: the handshake that opens a connection and the header in front
// of every message. Both start with a magic so that a stranger, a peer of another build, or a
// stream that lost its framing is refused with a clear message instead of being read as data.
//
// Fields travel in host byte order: ranks of one job run the same build on the same architecture,
// and a peer of the other endianness fails the magic check.
#pragma once

#include <cstdint>
#include <type_traits>

namespace braid::transport::tcp {

constexpr uint32_t kHandshakeMagic = 0x48545242;  // "BRTH" in memory on little-endian hosts
constexpr uint32_t kMessageMagic = 0x4d545242;    // "BRTM"
constexpr uint16_t kWireVersion = 1;

enum class HandshakeKind : uint16_t { kHello = 1, kAccept = 2 };

// Sent by the connecting (lower) rank, answered with kAccept by the listening (higher) rank. The
// connector counts the link as up only once the answer arrives, so a refusal is seen at Connect.
struct HandshakeFrame {
  uint32_t magic = kHandshakeMagic;
  uint16_t version = kWireVersion;
  uint16_t kind = static_cast<uint16_t>(HandshakeKind::kHello);
  uint64_t comm_id = 0;
  int32_t sender_rank = -1;
  int32_t receiver_rank = -1;
};
static_assert(sizeof(HandshakeFrame) == 24, "handshake frame layout");
static_assert(std::is_trivially_copyable<HandshakeFrame>::value, "sent as raw bytes");

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
