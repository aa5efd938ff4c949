// Segment: the shared memory of one shm connection, and its layout.
//
// Why one memfd per connection, passed over a Unix socket: a memfd has no name, so nothing ever
// appears in /dev/shm and the kernel frees the pages when the last mapping and descriptor go away
// -- on a clean exit, on an error path and after SIGKILL alike. No unlink step can be missed.
//
// Layout (every field a reader polls sits on its own cache line, so the two ranks never write to
// the same line and a poll loop costs one miss per real event):
//   page 0   SegmentHeader: identity (magic, version, comm_id, ranks, sizes), then
//            side[2]    one per rank of the pair (0 = the dialing, lower rank): the futex word its
//                       sleepers wait on and the count of those sleepers;
//            ring[2]    one per direction (index = writing side): the producer's line (head,
//                       doorbell request, abandoned flag) and the consumer's line (tail, count of
//                       remote copies done, copy-in-progress flag).
//   then     the ring written by side 0, then the ring written by side 1 (page aligned).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace braid::transport::shm {

constexpr size_t kCacheLine = 64;
constexpr uint32_t kSegmentMagic = 0x47534842;  // "BHSG" in memory on little-endian hosts
constexpr uint16_t kSegmentVersion = 1;

// Per rank of the pair. Written by the other side (wake_seq) and by this side (sleepers).
struct SideControl {
  // Futex word. Whoever has news for this side while it sleeps (sleepers > 0) bumps it and calls
  // FUTEX_WAKE; a sleeper waits while it still holds the value read before its last check.
  alignas(kCacheLine) std::atomic<uint32_t> wake_seq;
  // Threads of this side asleep on wake_seq, or about to be (announced before the last check).
  alignas(kCacheLine) std::atomic<uint32_t> sleepers;
};

// Per direction; the ring data lives after the header.
struct RingControl {
  // ---- producer's line ----
  // Bytes published as of the producer's last quarter-ring crossing or last wait for room
  // (monotonic; RingWriter::Commit says why not after every record). The consumer finds records
  // by their stamps, so head is informational: it lets a reader of a core dump see how far the
  // producer got.
  alignas(kCacheLine) std::atomic<uint64_t> head;
  // Set by the producer when sends wait for ring space and no thread may be polling: the consumer
  // then rings the doorbell (one byte on the Unix socket) after freeing space, so the producer's
  // control thread pushes the rest even while the producing rank waits on another transport.
  std::atomic<uint32_t> want_doorbell;
  // Set once the producer failed its side (close, abort, peer loss): remote descriptors still in
  // the ring point at buffers the producer no longer guarantees.
  std::atomic<uint32_t> abandoned;
  // ---- consumer's line ----
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // bytes consumed (monotonic)
  // Remote (single-copy) messages the consumer finished copying; completes the producer's sends.
  std::atomic<uint64_t> remote_done;
  // Non-zero while the consumer copies from the producer's memory (same-process peers only: the
  // producer waits for it to clear before it lets go of its buffers).
  std::atomic<uint32_t> reader_busy;
};

struct SegmentHeader {
  alignas(kCacheLine) uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t comm_id;
  int32_t ranks[2];  // side 0 (dialer, lower rank), side 1
  uint64_t ring_bytes;
  uint64_t segment_bytes;
  SideControl side[2];
  RingControl ring[2];
};
static_assert(sizeof(SegmentHeader) <= 4096, "header fits in the first page");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "atomics shared between processes");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "atomics shared between processes");

constexpr size_t kHeaderBytes = 4096;

// One mapping of a connection's segment. Move-only; unmaps on destruction.
class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates an anonymous segment (memfd) for the pair (rank_lo dials rank_hi) with two rings of
  // `ring_bytes` (a power of two, >= 64 KiB), maps and initialises it. `*fd` receives the memfd,
  // to be passed to the peer and then closed. Errors: kSystemError naming the failing call.
  static Result<Segment> Create(uint64_t comm_id, int rank_lo, int rank_hi, uint64_t ring_bytes,
                                int* fd);
  // Maps a segment received from a peer and checks that its header describes the expected pair.
  // Does not take ownership of `fd`. Errors: kRemoteError (wrong size or header, with the
  // reason), kSystemError (mmap).
  static Result<Segment> Attach(int fd, uint64_t expected_bytes, uint64_t comm_id, int rank_lo,
                                int rank_hi, uint64_t ring_bytes);

  // Bytes of a segment with rings of `ring_bytes`.
  static uint64_t BytesFor(uint64_t ring_bytes) { return kHeaderBytes + 2 * ring_bytes; }

  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }
  // Data of the ring written by `side`.
  char* ring_data(int side) const {
    return static_cast<char*>(base_) + kHeaderBytes + side * header()->ring_bytes;
  }
  bool valid() const { return base_ != nullptr; }

 private:
  Segment(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace braid::transport::shm
