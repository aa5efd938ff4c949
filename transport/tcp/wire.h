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

// The goodbye (docs/FAILURES.md): a rank that closes its links because of a failure (its
// transport is aborted) sends, where the stream is between two messages, one MessageHeader with
// this magic, tag 0 and `bytes` bytes of text (at most kMaxGoodbyeBytes) saying why, then shuts
// the socket down. A peer that reads it instead of a message header reports "rank P closed the
// link and said why: <text>" instead of a bare end of file, so it can tell a rank that aborted
// because of another from a rank that is gone, even without the store. Never sent on the data
// path: only the failure path writes it, and the receiver looks for it only where a header's
// magic is not kMessageMagic.
constexpr uint32_t kGoodbyeMagic = 0x42475242;  // "BRGB"
constexpr size_t kMaxGoodbyeBytes = 2048;
static_assert(std::is_trivially_copyable<MessageHeader>::value, "sent as raw bytes");

}  // namespace braid::transport::tcp
