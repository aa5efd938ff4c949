// What cuda_ipc peers exchange: the handshake's protocol (transport/handshake.h), the offer of
// each side's inbox after it, and the layout of an inbox's control block.
//
// Fields travel and sit in host byte order: ranks of one host run one build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "transport/handshake.h"

namespace braid::transport::cuda_ipc {

constexpr handshake::Protocol kProtocol{"cuda_ipc", 0x50494342u};  // "BCIP"

// After the handshake each side offers the peer the inbox it made for it (inbox.h): across
// processes two frames, the device staging buffer's descriptor and then the control block's,
// each attached with SCM_RIGHTS; between threads of one process one frame naming the inbox in
// this process's registry (CUDA cannot import in the process that exported, and need not).
constexpr uint32_t kOfferMagic = 0x4F504342u;  // "BCPO"
constexpr uint16_t kOfferVersion = 1;
enum class OfferKind : uint16_t {
  kData = 1,     // the staging buffer's descriptor is attached
  kControl = 2,  // the control block's descriptor is attached
  kLocal = 3,    // same process: `token` names the inbox
};
struct Offer {
  uint32_t magic = kOfferMagic;
  uint16_t version = kOfferVersion;
  uint16_t kind = 0;
  int32_t pid = 0;
  uint32_t reserved = 0;
  uint64_t token = 0;          // kLocal
  uint64_t data_bytes = 0;     // the staging ring's bytes (the exporter's Memory::size())
  uint64_t control_bytes = 0;  // the control block's mapping
};
static_assert(std::is_trivially_copyable<Offer>::value, "sent as raw bytes");

// One message's header in the receiver's control block, written by the sender's host.
struct Header {
  uint64_t tag;
  uint64_t bytes;
  uint64_t start;  // the fill cursor where its data begins (aligned to kMessageAlign)
};

// Messages start on this boundary of the ring, so device copies begin aligned.
constexpr uint64_t kMessageAlign = 64;
// Headers the sender may post ahead of the receiver.
constexpr uint64_t kHeaderSlots = 1024;

// One direction's control block: host memory (a memfd both processes map and register with
// their device), so the hosts read headers and cursors directly and the streams write cursors
// with WriteValue32 (cuStreamWriteValue32) after their copies.
//
// Cursors count ring bytes since the link began (the fill cursor F, the drain cursor C); a byte
// at cursor x lives at ring offset x % ring_bytes, and the sender writes only while F - C fits
// the ring. The 32-bit flags hold their low bits, read back by the hosts with a cyclic
// difference (a cursor never runs 2 GiB ahead of the other side's view of it).
struct alignas(64) Control {
  uint32_t magic = kOfferMagic;
  uint32_t version = kOfferVersion;
  alignas(64) uint32_t ready = 0;           // low bits of F, by the sender's stream after a copy in
  alignas(64) uint32_t consumed = 0;        // low bits of C, by the receiver's stream after a copy out
  alignas(64) uint64_t headers_posted = 0;  // by the sender's host (release)
  alignas(64) uint64_t headers_taken = 0;   // by the receiver's host (release)
  alignas(64) Header headers[kHeaderSlots];
};

}  // namespace braid::transport::cuda_ipc
