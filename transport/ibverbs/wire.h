// What the verbs transport's two sides say to each other: the set-up record exchanged over the
// authenticated bootstrap link, and the layout of a ring slot and of an immediate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace braid::transport::ibverbs {

constexpr uint32_t kSetupMagic = 0x42524942;  // "BRIB"
constexpr uint16_t kSetupVersion = 1;

// Bootstrap-link message tags of the set-up (the link carries nothing else).
constexpr uint64_t kSetupTag = 0x7665726273657475ULL;  // "verbsetu"
constexpr uint64_t kReadyTag = 0x7665726272656479ULL;  // "verbredy"

// Everything a peer needs to connect its QP to this side's and write into this side's ring.
struct SetupInfo {
  uint32_t magic = kSetupMagic;
  uint16_t version = kSetupVersion;
  uint16_t lid = 0;         // InfiniBand ports
  uint8_t gid[16] = {};     // RoCE ports (and InfiniBand across subnets)
  uint32_t link_layer = 0;  // IBV_LINK_LAYER_*
  uint32_t qpn = 0;
  uint32_t psn = 0;         // this side's first send PSN = the peer's expected receive PSN
  uint32_t mtu = 0;         // ibv_mtu of this side's port
  uint32_t slots = 0;       // ring geometry; both sides must agree
  uint32_t slot_bytes = 0;
  uint64_t ring_addr = 0;
  uint32_t ring_rkey = 0;
  uint32_t reserved = 0;
};
static_assert(std::is_trivially_copyable<SetupInfo>::value, "sent as raw bytes");

// The head of every ring slot: the message the chunk belongs to. Every chunk carries it, so the
// receiver checks tag and size on a message's first chunk and can Probe a message from it.
struct SlotHeader {
  uint64_t tag = 0;
  uint64_t bytes = 0;  // the whole message's
};
constexpr size_t kSlotHeaderBytes = sizeof(SlotHeader);

// The immediate of every write (host order here; htonl on the wire): a data chunk carries its
// byte count (header included) in the low bits, a credit return sets kCreditFlag and carries the
// number of slots freed.
constexpr uint32_t kCreditFlag = 0x80000000u;

}  // namespace braid::transport::ibverbs
