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

#include "transport/handshake.h"

namespace braid::transport::tcp {

// The handshake that opens a connection is the transports' one (transport/handshake.h): the
// dialer D is the lower rank, the listener L the higher; the frames are bare envelopes (tcp
// needs nothing besides). L answers a frame that carries this magic with a refusal it can read,
// and closes on a stranger. D counts the link as up only once kAccept arrives, so any refusal is
// seen at Connect.
constexpr handshake::Protocol kProtocol{"tcp", 0x48545242};  // "BRTH" in memory (little-endian)
using HandshakeFrame = handshake::Envelope;

constexpr uint32_t kMessageMagic = 0x4d545242;  // "BRTM"

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
