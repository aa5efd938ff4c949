// A peer whose message by reference names memory that is not there: on the shm single-copy path
// (braidConfig_t::shmSingleCopyBytes) a large message travels as the sender's address and length,
// and the receiver reads them with process_vm_readv. An address that is not mapped, or a length
// that runs past the end of the mapping, must fail the receive with braidRemoteError naming the
// peer, the address and length and the kernel's reason, never crash or hang the receiver; a
// length that differs from the receive's fails it naming both sizes.
//
// The sender is a real rank in its own process that hands braidSend a buffer it does not have
// (the transport passes the address on without reading it); the receiver reads it for real.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

constexpr size_t kBytes = size_t{1} << 20;

enum class Bad { kUnmapped, kPastTheEnd, kLonger };

const char* Name(Bad bad) {
  switch (bad) {
    case Bad::kUnmapped: return "an unmapped address";
    case Bad::kPastTheEnd: return "a length past the end of the mapping";
    default: return "a longer message than the receive";
  }
}

// What rank 1 sends from: memory of which at most one page is readable.
char* BadBuffer(Bad bad) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* region = mmap(nullptr, kBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
  if (region == MAP_FAILED) return nullptr;
  char* start = static_cast<char*>(region);
  if (bad == Bad::kUnmapped) {
    munmap(region, kBytes + page);  // nothing is mapped there any more
  } else if (bad == Bad::kPastTheEnd) {
    munmap(start + page, kBytes);   // one readable page, then nothing
  }
  return start;
}

TEST_CASE("single copy: a peer's bad address or length fails the receive with a clear error",
          "[single_copy][faults]") {
  const Bad bad = GENERATE(Bad::kUnmapped, Bad::kPastTheEnd, Bad::kLonger);
  CommJob job;
  job.size = 2;
  job.ranks = Ranks::kProcesses;
  job.config.transports = "shm";
  job.config.shmSingleCopyBytes = 1;
  job.config.timeoutMs = 20000;
  job.timeout_ms = 60000;
  CAPTURE(Name(bad));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 1) {
      char* buffer = BadBuffer(bad);
      if (buffer == nullptr) return "mmap failed";
      const size_t bytes = bad == Bad::kLonger ? kBytes + 1 : kBytes;
      braidResult_t rc = braidSend(buffer, bytes, braidUint8, 0, comm, nullptr);
      // A longer message is acknowledged unread and its send completes, as over TCP; a buffer
      // the receiver could not read is never acknowledged, so its send fails once the receiver
      // drops the link (a success there would mean braid read memory that is not there).
      if (bad == Bad::kLonger) return rc == braidSuccess ? "" : CallFailure(comm, rc, "send");
      return rc != braidSuccess ? "" : "a send from unreadable memory succeeded";
    }
    std::vector<char> in(kBytes);
    braidResult_t rc = braidRecv(in.data(), kBytes, braidUint8, 1, comm, nullptr);
    const std::string error = braidGetLastError(comm);
    if (rc == braidSuccess) return "the receive succeeded";
    std::vector<std::string> wanted;
    if (bad == Bad::kLonger) {
      wanted = {"receive from rank 1", std::to_string(kBytes) + " bytes",
                std::to_string(kBytes + 1) + " bytes"};
    } else {
      wanted = {"rank 1", "sent by reference", std::to_string(kBytes) + " bytes",
                "cannot be read", "Bad address"};
      if (rc != braidRemoteError) return "expected braidRemoteError: " + error;
    }
    for (const std::string& text : wanted) {
      if (error.find(text) == std::string::npos) return "'" + text + "' missing from: " + error;
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

}  // namespace
}  // namespace braid::testing
