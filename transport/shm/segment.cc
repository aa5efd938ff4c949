// Creation and mapping of connection segments (see segment.h for the why and the layout).
#include "transport/shm/segment.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <utility>

namespace braid::transport::shm {
namespace {

std::string Errno(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

}  // namespace

Segment::~Segment() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

Segment::Segment(Segment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Result<Segment> Segment::Create(uint64_t comm_id, int rank_lo, int rank_hi, uint64_t ring_bytes,
                                int* fd) {
  *fd = -1;
  if (ring_bytes < (64u << 10) || (ring_bytes & (ring_bytes - 1)) != 0) {
    return Status::InvalidArgument("shm ring size " + std::to_string(ring_bytes) +
                                   " is not a power of two >= 64 KiB");
  }
  const uint64_t bytes = BytesFor(ring_bytes);
  int memfd = ::memfd_create("braid-shm", MFD_CLOEXEC);
  if (memfd < 0) return Status::SystemError("creating a shm segment: " + Errno("memfd_create"));
  if (::ftruncate(memfd, static_cast<off_t>(bytes)) != 0) {
    Status status = Status::SystemError("sizing a shm segment: " + Errno("ftruncate"));
    ::close(memfd);
    return status;
  }
  // MAP_POPULATE: fault the pages in now rather than on the first messages.
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
  if (base == MAP_FAILED) {
    Status status = Status::SystemError("mapping a shm segment: " + Errno("mmap"));
    ::close(memfd);
    return status;
  }
  Segment segment(base, bytes);
  auto* header = new (base) SegmentHeader();  // zeroed pages: the atomics start at 0
  header->magic = kSegmentMagic;
  header->version = kSegmentVersion;
  header->comm_id = comm_id;
  header->ranks[0] = rank_lo;
  header->ranks[1] = rank_hi;
  header->ring_bytes = ring_bytes;
  header->segment_bytes = bytes;
  *fd = memfd;
  return segment;
}

Result<Segment> Segment::Attach(int fd, uint64_t expected_bytes, uint64_t comm_id, int rank_lo,
                                int rank_hi, uint64_t ring_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::SystemError("shm segment: " + Errno("fstat"));
  if (expected_bytes != BytesFor(ring_bytes) ||
      static_cast<uint64_t>(st.st_size) != expected_bytes) {
    return Status::RemoteError("shm segment has " + std::to_string(st.st_size) +
                               " bytes, the handshake announced " + std::to_string(expected_bytes) +
                               " for rings of " + std::to_string(ring_bytes));
  }
  void* base =
      ::mmap(nullptr, expected_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) return Status::SystemError("mapping a shm segment: " + Errno("mmap"));
  Segment segment(base, expected_bytes);
  const SegmentHeader* h = segment.header();
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion || h->comm_id != comm_id ||
      h->ranks[0] != rank_lo || h->ranks[1] != rank_hi || h->ring_bytes != ring_bytes ||
      h->segment_bytes != expected_bytes) {
    return Status::RemoteError("shm segment header does not match the handshake");
  }
  return segment;
}

}  // namespace braid::transport::shm
