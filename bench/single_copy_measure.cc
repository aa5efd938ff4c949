// The single-copy measurement of bench/calibrate (see single_copy_measure.h for the why).
#include "bench/single_copy_measure.h"

#include <errno.h>
#include <sched.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/forked_pair.h"
#include "bindings/c/braid.h"

namespace braid::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kSizes[] = {size_t{64} << 10, size_t{256} << 10, size_t{512} << 10,
                             size_t{1} << 20,  size_t{4} << 20,   size_t{16} << 20};
constexpr size_t kBytesPerRound = size_t{16} << 20;
constexpr int kRounds = 40;  // per size and path; the first of each warms up

// Read by the probe's child out of its parent.
volatile uint64_t g_probe_value = 0;

bool Check(braidResult_t rc, braidComm_t comm, const char* what) {
  if (rc == braidSuccess) return true;
  std::fprintf(stderr, "calibrate: single copy: %s failed: %s: %s\n", what,
               braidGetErrorString(rc), braidGetLastError(comm));
  return false;
}

// One round: kBytesPerRound each way in messages of `bytes`, all of them posted at once (one
// group of every send and receive), so each side streams them as a pipelined collective streams
// its chunks: a sender on the ring runs ahead by a ring's worth while the receiver copies out,
// where one by reference waits for the receiver's copy. (Exchanging one message at a time, a
// group per message, measured single copy 3-4x faster than the ring from 64 KiB to 1 MiB on the
// quiet development VM, while every all-gather and broadcast there ran 1.1-2.5x slower by single
// copy: that shape rewarded the one thing collectives do not do, waiting between messages.)
// Seconds, or a negative number on failure.
double Round(braidComm_t comm, int peer, char* send, char* recv, size_t bytes) {
  const size_t messages = std::max<size_t>(1, kBytesPerRound / bytes);
  const auto start = Clock::now();
  if (!Check(braidGroupStart(), comm, "group start")) return -1;
  for (size_t i = 0; i < messages; ++i) {
    if (!Check(braidSend(send, bytes, braidUint8, peer, comm, nullptr), comm, "send") ||
        !Check(braidRecv(recv, bytes, braidUint8, peer, comm, nullptr), comm, "recv")) {
      return -1;
    }
  }
  if (!Check(braidGroupEnd(), comm, "group end")) return -1;
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Rank `rank` of 2: fills `points` (rank 0's are reported). False if anything failed.
bool RunRank(int rank, const braidUniqueId ids[2], std::vector<SingleCopyPoint>* points) {
  braidComm_t comms[2] = {nullptr, nullptr};  // [0] the ring, [1] single copy
  bool ok = true;
  for (int path = 0; path < 2 && ok; ++path) {
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.transports = "shm";
    config.shmSingleCopyBytes = path;  // 0: never; 1: every message
    ok = Check(braidCommInitRankConfig(&comms[path], 2, ids[path], rank, &config), nullptr,
               "braidCommInitRank");
  }
  std::vector<char> send(kSizes[sizeof(kSizes) / sizeof(kSizes[0]) - 1], 1);
  std::vector<char> recv(send.size(), 2);
  for (size_t bytes : kSizes) {
    if (!ok) break;
    double best[2] = {1e9, 1e9};
    std::vector<double> speedups;
    for (int round = 0; round < kRounds && ok; ++round) {
      double seconds[2] = {0, 0};
      for (int turn = 0; turn < 2 && ok; ++turn) {
        const int path = (round + turn) % 2;  // alternate which path goes first
        seconds[path] = Round(comms[path], 1 - rank, send.data(), recv.data(), bytes);
        ok = seconds[path] >= 0;
      }
      if (!ok || round == 0) continue;
      best[0] = std::min(best[0], seconds[0]);
      best[1] = std::min(best[1], seconds[1]);
      speedups.push_back(seconds[0] / std::max(seconds[1], 1e-9));
    }
    if (!ok) break;
    std::sort(speedups.begin(), speedups.end());
    const double moved = static_cast<double>(std::max<size_t>(1, kBytesPerRound / bytes) * bytes);
    points->push_back({bytes, moved / best[0] / 1e9, moved / best[1] / 1e9,
                       speedups[speedups.size() / 2]});
  }
  for (braidComm_t comm : comms) {
    if (comm != nullptr) braidCommDestroy(comm);
  }
  return ok;
}

// Keeps this process on the first CPU it may use (both ranks call it: they take turns there).
void PinToOneCpu() {
  cpu_set_t allowed, one;
  CPU_ZERO(&one);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  if (sched_setaffinity(0, sizeof(one), &one) != 0) std::perror("calibrate: pin");
}

}  // namespace

std::string CrossMemoryRefusal() {
  g_probe_value = 0x5157c0b1e5ull ^ static_cast<uint64_t>(getpid());
  int fds[2];
  if (pipe(fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child < 0) return std::string("fork: ") + std::strerror(errno);
  if (child == 0) {
    // The child reads its parent: a process that is not its ancestor, as two ranks are to each
    // other (Yama's ptrace_scope 1 lets an ancestor read, not a sibling).
    close(fds[0]);
    uint64_t value = 0;
    iovec local{&value, sizeof(value)};
    iovec remote{const_cast<uint64_t*>(&g_probe_value), sizeof(value)};
    std::string why;
    if (process_vm_readv(getppid(), &local, 1, &remote, 1, 0) != sizeof(value)) {
      why = std::string("process_vm_readv of another process: ") + std::strerror(errno);
    } else if (value != g_probe_value) {
      why = "process_vm_readv read another process than asked (a different pid namespace?)";
    }
    ssize_t written = write(fds[1], why.data(), why.size());
    (void)written;
    _exit(0);
  }
  close(fds[1]);
  std::string why;
  char buffer[256];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) why.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status)) return "the probe process died (status " + std::to_string(status) + ")";
  return why;
}

size_t SingleCopyCrossover(const std::vector<SingleCopyPoint>& points) {
  // The smallest size where single copy wins by the margin and is not slower by it at any larger
  // size (out of the caches both paths run at the memory's speed, a tie that must not hide a
  // win below).
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].paired_speedup < kSingleCopyMargin) continue;
    bool holds = true;
    for (size_t j = i + 1; j < points.size(); ++j) {
      holds = holds && points[j].paired_speedup * kSingleCopyMargin >= 1.0;
    }
    if (holds) return points[i].bytes;
  }
  return 0;
}

SingleCopyMeasurement MeasureSingleCopy(bool shared_core, bool* ok) {
  SingleCopyMeasurement result;
  *ok = true;
  result.refused = CrossMemoryRefusal();
  if (!result.refused.empty()) return result;
  braidUniqueId ids[2];
  for (braidUniqueId& id : ids) {
    if (!Check(braidGetUniqueId(&id), nullptr, "braidGetUniqueId")) {
      *ok = false;
      return result;
    }
  }
  const std::optional<std::string> bytes =
      RunForkedPair([&](int rank) -> std::optional<std::string> {
        if (shared_core) PinToOneCpu();
        std::vector<SingleCopyPoint> points;
        if (!RunRank(rank, ids, &points)) return std::nullopt;
        return std::string(reinterpret_cast<const char*>(points.data()),
                           points.size() * sizeof(SingleCopyPoint));
      });
  const size_t expected = sizeof(kSizes) / sizeof(kSizes[0]) * sizeof(SingleCopyPoint);
  *ok = bytes && bytes->size() == expected;
  if (!*ok) return result;
  result.points.resize(sizeof(kSizes) / sizeof(kSizes[0]));
  std::memcpy(result.points.data(), bytes->data(), expected);
  result.min_bytes = SingleCopyCrossover(result.points);
  result.single_gbps_16m = result.points.back().single_gbps;
  return result;
}

}  // namespace braid::bench
