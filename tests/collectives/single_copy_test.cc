// The shm single-copy path between processes (algorithms/single_copy_choice.h): every collective
// and send/recv gives the serial references' results at 2-4 ranks in forked processes when large
// messages go by cross-memory attach (process_vm_readv from the sender's buffer), and when the
// kernel refuses it (the ring carries everything).
//
// The path is forced per communicator (braidConfig_t::shmSingleCopyBytes): 1 sends every message
// by reference, odd and tiny ones included; 4096 mixes the two paths within one collective. Which
// path each link took is read from braid's INFO log ("shm connection to rank P is up (large
// messages: process_vm_readv|ring)"), captured per job (tests/harness/log_capture.h: the forked
// ranks inherit the test process's log file and level).
//
// The refusal is real, not a flag: each rank drops CAP_SYS_PTRACE and makes itself non-dumpable
// before it creates its communicator, so the kernel's ptrace access check refuses every peer's
// process_vm_readv with EPERM, as in a container without ptrace rights.
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/collectives/collective_checks.h"
#include "tests/harness/communicator.h"
#include "tests/harness/log_capture.h"

namespace braid::testing {
namespace {

// How many lines of `log` contain `text`.
int LinesWith(const std::string& log, const std::string& text) {
  std::istringstream in(log);
  int found = 0;
  for (std::string line; std::getline(in, line);) found += line.find(text) != std::string::npos;
  return found;
}

// Makes this process a rank whose memory no peer may read and which may read no peer's: without
// CAP_SYS_PTRACE and not dumpable, the kernel refuses process_vm_readv between such processes
// with EPERM. Runs in the forked rank before its communicator (and any thread of braid's) exists.
std::string RefuseCrossMemoryAttach() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  if (syscall(SYS_capget, &header, caps) != 0) {
    return std::string("capget: ") + std::strerror(errno);
  }
  const uint32_t bit = 1u << (CAP_SYS_PTRACE % 32);
  caps[CAP_SYS_PTRACE / 32].effective &= ~bit;
  caps[CAP_SYS_PTRACE / 32].permitted &= ~bit;
  caps[CAP_SYS_PTRACE / 32].inheritable &= ~bit;
  if (syscall(SYS_capset, &header, caps) != 0) {
    return std::string("capset without CAP_SYS_PTRACE: ") + std::strerror(errno);
  }
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return std::string("prctl(PR_SET_DUMPABLE, 0): ") + std::strerror(errno);
  }
  return "";
}

// Every collective at counts around the ring's pieces and the single-copy threshold, odd ones
// included, in two datatypes, in and out of place, rooted at the last rank.
std::vector<Call> Calls(int size) {
  std::vector<Call> calls;
  for (Coll coll : {Coll::kAllGather, Coll::kBroadcast, Coll::kGather, Coll::kScatter,
                    Coll::kAllToAll, Coll::kAllReduce, Coll::kReduceScatter, Coll::kReduce}) {
    for (size_t count : {size_t{1}, size_t{13}, size_t{4099}, size_t{131073}}) {
      for (braidDataType_t type : {braidInt8, braidFloat32}) {
        for (bool in_place : {false, true}) {
          Call call;
          call.coll = coll;
          call.type = type;
          call.op = braidSum;
          call.count = count;
          call.in_place = in_place;
          call.root = size - 1;
          calls.push_back(call);
        }
      }
    }
  }
  return calls;
}

// Value `i` of what `source` sends `destination` in the point-to-point ring.
int32_t P2pValue(int source, int destination, size_t i) {
  return static_cast<int32_t>(source * 1000003 + destination * 7919 + static_cast<int64_t>(i));
}

// A send/recv ring (each rank sends to the next and receives from the previous at once), checked
// element by element.
std::string P2pRing(braidComm_t comm, int rank, int size, size_t count) {
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  std::vector<int32_t> out(count), in(count, -1);
  for (size_t i = 0; i < count; ++i) out[i] = P2pValue(rank, next, i);
  BRAID_TRY(braidGroupStart(), "group start");
  BRAID_TRY(braidSend(out.data(), count, braidInt32, next, comm, nullptr), "send");
  BRAID_TRY(braidRecv(in.data(), count, braidInt32, prev, comm, nullptr), "recv");
  BRAID_TRY(braidGroupEnd(), "group end");
  for (size_t i = 0; i < count; ++i) {
    if (in[i] != P2pValue(prev, rank, i)) {
      return "send/recv of " + std::to_string(count) + " int32 from rank " +
             std::to_string(prev) + ": element " + std::to_string(i) + " is " +
             std::to_string(in[i]) + ", expected " + std::to_string(P2pValue(prev, rank, i));
    }
  }
  return "";
}

std::string RunEverything(braidComm_t comm, int rank, int size) {
  for (const Call& call : Calls(size)) {
    std::string failure = RunAndCheck(comm, rank, size, call);
    if (!failure.empty()) return failure;
  }
  for (size_t count : {size_t{1}, size_t{1025}, size_t{262147}}) {
    std::string failure = P2pRing(comm, rank, size, count);
    if (!failure.empty()) return failure;
  }
  return "";
}

CommJob ProcessJob(int size, int single_copy_bytes, const char* algo) {
  CommJob job;
  job.size = size;
  job.ranks = Ranks::kProcesses;
  job.config.transports = "shm";
  job.config.shmSingleCopyBytes = single_copy_bytes;
  job.config.algo = algo;
  job.config.timeoutMs = 60000;
  job.timeout_ms = 240000;
  return job;
}

const char* const kLinkByReference = "(large messages: process_vm_readv)";
const char* const kLinkByRing = "(large messages: ring)";

TEST_CASE("single copy: every collective and send/recv between processes matches the references",
          "[single_copy]") {
  const int size = GENERATE(2, 3, 4);
  // "": the cost model's picks; then the ring family and the trees, so each algorithm's messages
  // go by reference (allreduce:ring is the ring's reduce-scatter then all-gather phase).
  const char* algo = GENERATE(as<const char*>{}, "",
                              "allreduce:ring;broadcast:ring;allgather:ring;reduce:ring",
                              "allreduce:rhd;broadcast:binomial;gather:binomial;scatter:binomial");
  const int threshold = GENERATE(1, 4096);
  if (threshold == 4096 && size != 3) return;  // the mixed paths once, at an odd rank count
  CommJob job = ProcessJob(size, threshold, algo);
  CAPTURE(Describe(job), threshold);
  LogCapture capture("single_copy_test", "INFO");
  auto results = RunComms(job, RunEverything);
  BRAID_CHECK_RANKS(results);
  const std::string log = capture.Text();
  // Every link made went by reference from its sender's side, and the choice was logged.
  CHECK(LinesWith(log, kLinkByReference) >= 2 * (size - 1));
  CHECK(LinesWith(log, kLinkByRing) == 0);
  CHECK(LinesWith(log, "shm: large messages between processes of this host: single copy "
                       "(process_vm_readv) from " +
                       std::string(threshold == 1 ? "1 bytes" : "4 KiB") +
                       "; set by BRAID_SHM_SINGLE_COPY_BYTES") == size);
}

TEST_CASE("single copy refused by the kernel: the ring carries everything, results still match",
          "[single_copy]") {
  const int size = GENERATE(2, 4);
  CommJob job = ProcessJob(size, 1, "");
  job.before_init = [](int, int) { return RefuseCrossMemoryAttach(); };
  CAPTURE(Describe(job));
  LogCapture capture("single_copy_test", "INFO");
  auto results = RunComms(job, RunEverything);
  BRAID_CHECK_RANKS(results);
  const std::string log = capture.Text();
  CHECK(LinesWith(log, kLinkByRing) >= 2 * (size - 1));
  CHECK(LinesWith(log, kLinkByReference) == 0);
  // Detected at the handshake and said once per process (WARN, since single copy was wanted).
  CHECK(LinesWith(log, "cannot read the memory of rank") >= size);
  CHECK(LinesWith(log, "Operation not permitted") >= size);
}

TEST_CASE("single copy: a negative shmSingleCopyBytes is refused, naming the field",
          "[single_copy]") {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.shmSingleCopyBytes = -5;
  braidUniqueId id = NewId();
  braidComm_t comm = nullptr;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(comm == nullptr);
  CHECK(std::string(braidGetLastError(nullptr)).find("shmSingleCopyBytes") != std::string::npos);
}

}  // namespace
}  // namespace braid::testing
