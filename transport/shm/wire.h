// The shm transport's handshake, sent over an abstract-namespace Unix socket (SOCK_SEQPACKET,
// so every frame arrives whole or not at all).
//
// Why a handshake at all on one host: the abstract socket name is reachable by any process in the
// network namespace. Every frame starts with a magic and a version, then the communicator id and
// both ranks, so a stranger, a peer of another build, another job or a stale address is refused
// with a logged reason instead of being mapped as a segment.
//
// Exchange (the lower rank dials the higher rank's socket):
//   dialer -> kHello   + the segment's memfd (SCM_RIGHTS); its process token and probe address
//   acceptor -> kAccept (or kRefuse with a reason); flags: kCanReadYou if process_vm_readv of the
//               dialer's probe returned the dialer's token
//   dialer -> kConfirm flags: kCanReadYou likewise for the acceptor
// Afterwards the socket carries only one-byte doorbells, and its end-of-file says the peer is
// gone (closed its link, exited, or was killed: the kernel closes the socket in every case).
#pragma once

#include <cstdint>
#include <type_traits>

namespace braid::transport::shm {

constexpr uint32_t kHandshakeMagic = 0x48534842;  // "BHSH" in memory on little-endian hosts
constexpr uint16_t kWireVersion = 1;

enum class FrameKind : uint16_t { kHello = 1, kAccept = 2, kConfirm = 3, kRefuse = 4 };

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
  char reason[128] = {};  // kRefuse: why, NUL-terminated
};
static_assert(sizeof(HandshakeFrame) == 192, "handshake frame layout");
static_assert(std::is_trivially_copyable<HandshakeFrame>::value, "sent as raw bytes");

// The doorbell byte (see RingControl::want_doorbell).
constexpr char kDoorbell = 'D';

}  // namespace braid::transport::shm
