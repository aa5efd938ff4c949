// The read family (algorithms/read_family.h: all-gather, broadcast, all-to-all, gather and
// scatter by single-copy reads of the peers' buffers) beyond the reference sweeps (sweep_test forces it as it forces
// every registered algorithm: as threads and over TCP, where every pair falls back to messages,
// and as processes): ranks as processes, where the reads are real process_vm_readv copies, over
// counts of every size class with odd byte lengths, in place and out of place; and a rank whose
// process refuses cross-memory attach (a seccomp filter answering process_vm_readv with EPERM,
// what containers without ptrace rights do), whose reads fall back to messages while the other
// ranks still read, each result checked against the serial references.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/collectives/collective_checks.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

// Per-rank (all-gather), per-peer (all-to-all) or whole-buffer (broadcast) byte counts: one byte,
// a few, a page and one, past the 64 KiB and 1 MiB marks, and a 4 MiB + 1 block (16 MiB gathered
// on 4 ranks), all odd.
const std::vector<size_t> kByteCounts = {1, 7, 4097, 65537, (size_t{1} << 20) + 3,
                                         (size_t{4} << 20) + 1};

std::vector<Call> CallsOf(Coll coll, int size) {
  std::vector<Call> calls;
  for (size_t count : kByteCounts) {
    for (bool in_place : {false, true}) {
      for (int root : {0, size - 1}) {
        if (!Rooted(coll) && root != 0) continue;
        Call call;
        call.coll = coll;
        call.type = braidUint8;
        call.count = count;
        call.in_place = in_place;
        call.root = root;
        calls.push_back(call);
      }
    }
  }
  // Multi-byte elements, an odd count of them.
  Call floats;
  floats.coll = coll;
  floats.type = braidFloat64;
  floats.count = 131071;
  calls.push_back(floats);
  return calls;
}

const char* Spec(Coll coll) {
  switch (coll) {
    case Coll::kAllGather: return "allgather:read";
    case Coll::kBroadcast: return "broadcast:read";
    case Coll::kGather: return "gather:read";
    case Coll::kScatter: return "scatter:read";
    default: return "alltoall:read";
  }
}

std::vector<std::string> RunReads(Coll coll, int size, const CommJob& base) {
  CommJob job = base;
  job.size = size;
  job.ranks = Ranks::kProcesses;
  job.config.transports = "shm";
  job.config.algo = Spec(coll);
  return RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    for (const Call& call : CallsOf(coll, n)) {
      std::string wrong = RunAndCheck(comm, rank, n, call);
      if (!wrong.empty()) return wrong;
    }
    return "";
  });
}

// Makes this process's process_vm_readv fail with EPERM, as a container without ptrace rights
// does, and checks that it does. "" or what went wrong.
std::string RefuseCrossMemoryAttach() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])),
                               filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return std::string("PR_SET_NO_NEW_PRIVS: ") + std::strerror(errno);
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    return std::string("installing the seccomp filter: ") + std::strerror(errno);
  }
  uint64_t source = 42, target = 0;
  iovec local{&target, sizeof(target)}, remote{&source, sizeof(source)};
  errno = 0;
  const ssize_t copied = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (copied != -1 || errno != EPERM) {
    return "process_vm_readv still works under the filter (returned " + std::to_string(copied) +
           ", errno " + std::to_string(errno) + ")";
  }
  return "";
}

}  // namespace

TEST_CASE("read family, ranks as processes: every size class matches the reference",
          "[read][processes]") {
  const Coll coll =
      GENERATE(Coll::kAllGather, Coll::kBroadcast, Coll::kAllToAll, Coll::kGather, Coll::kScatter);
  const int size = GENERATE(2, 3, 4);
  CAPTURE(Spec(coll), size);
  BRAID_CHECK_RANKS(RunReads(coll, size, CommJob()));
}

TEST_CASE("read family: a rank whose process refuses cross-memory attach gets its blocks as "
          "messages, the others still read",
          "[read][processes][faults]") {
  const Coll coll =
      GENERATE(Coll::kAllGather, Coll::kBroadcast, Coll::kAllToAll, Coll::kGather, Coll::kScatter);
  CAPTURE(Spec(coll));
  CommJob job;
  // Rank 1 cannot read anyone (its links say so from the handshake's probe on); the others can
  // read rank 1 and each other.
  job.before_init = [](int rank, int) { return rank == 1 ? RefuseCrossMemoryAttach() : ""; };
  BRAID_CHECK_RANKS(RunReads(coll, 3, job));
}

}  // namespace braid::testing
