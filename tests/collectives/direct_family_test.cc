// All-to-all, gather, scatter and barrier against a serial reference.
//
// Every element encodes (source rank, destination rank, index), so a block that lands at the
// wrong offset, comes from the wrong rank or is cut at the wrong place is caught. Sweeps: world
// sizes 1, 2, 3, 4, 5, 8 as threads (3 and 4 also as processes) × counts 0, 1, a prime and a large
// prime × every datatype × in place and out of place × every root. Which gather/scatter algorithm
// runs is forced per binary through BRAID_ALGO (tests/collectives/BUILD), so this source is built
// once per variant. The thread runs use a small chunk so the sliced paths (in-place all-to-all,
// binomial trees) take many slices with a ragged last one; the process runs keep the default.
#include <sys/mman.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/collectives/reference.h"
#include "tests/harness/multi_rank.h"

namespace braid::testing {
namespace {

constexpr unsigned char kFill = 0x5A;  // never-written bytes, and the guard byte past each buffer
const size_t kAllCounts[] = {0, 1, 1031, 20011};

// Values stay exactly representable: small types get a small modulus.
int64_t Modulus(braidDataType_t type) {
  switch (type) {
    case braidInt8:
    case braidUint8:
    case braidBfloat16:
      return 127;
    case braidFloat16:
      return 2039;
    default:
      return 1000003;
  }
}

int64_t Encode(braidDataType_t type, int src, int dst, size_t i) {
  const int64_t m = Modulus(type);
  return (static_cast<int64_t>(src) * 53 + static_cast<int64_t>(dst) * 17 +
          static_cast<int64_t>(i % static_cast<size_t>(m)) + 1) %
         m;
}

// Writes block `block` of `buffer` (count elements each) as what `src` sends `dst`.
void FillBlock(braidDataType_t type, void* buffer, size_t block, size_t count, int src, int dst) {
  for (size_t i = 0; i < count; ++i) {
    Store(type, buffer, block * count + i, static_cast<double>(Encode(type, src, dst, i)));
  }
}

// A buffer of `elements` elements plus a guard byte, all kFill.
std::vector<char> Blank(braidDataType_t type, size_t elements) {
  return std::vector<char>(elements * TypeSize(type) + 1, static_cast<char>(kFill));
}

// "" if block `block` of `buffer` holds what `src` sent `dst`, else the first wrong element.
std::string CheckBlock(braidDataType_t type, const void* buffer, size_t block, size_t count,
                       int src, int dst) {
  for (size_t i = 0; i < count; ++i) {
    double got = Load(type, buffer, block * count + i);
    double want = static_cast<double>(Encode(type, src, dst, i));
    if (!(got == want)) {
      return "block " + std::to_string(block) + " element " + std::to_string(i) + " is " +
             std::to_string(got) + ", expected " + std::to_string(want) + " (from rank " +
             std::to_string(src) + " to rank " + std::to_string(dst) + ")";
    }
  }
  return "";
}

// "" if block `block` was never written.
std::string CheckUntouched(braidDataType_t type, const std::vector<char>& buffer, size_t block,
                           size_t count) {
  const size_t bytes = count * TypeSize(type);
  for (size_t b = block * bytes; b < (block + 1) * bytes; ++b) {
    if (static_cast<unsigned char>(buffer[b]) != kFill) {
      return "block " + std::to_string(block) + " was written although it is not this rank's";
    }
  }
  return "";
}

std::string CheckGuard(const std::vector<char>& buffer, const char* name) {
  return static_cast<unsigned char>(buffer.back()) == kFill ? ""
                                                            : std::string("wrote past ") + name;
}

struct SweepOptions {
  bool alltoall = false;
  bool rooted = false;  // gather and scatter
  bool large = true;    // include the largest count
  int chunk_bytes = BRAID_CONFIG_UNDEF_INT;
};

std::string Fail(braidComm_t comm, braidResult_t rc) {
  return std::string(braidGetErrorString(rc)) + ": " + braidGetLastError(comm);
}

std::string AllToAll(braidComm_t comm, int rank, int n, braidDataType_t type, size_t count,
                     bool in_place) {
  std::vector<char> send = Blank(type, n * count);
  for (int p = 0; p < n; ++p) FillBlock(type, send.data(), p, count, rank, p);
  const std::vector<char> original = send;
  std::vector<char> recv = Blank(type, n * count);
  std::vector<char>& result = in_place ? send : recv;
  braidResult_t rc = braidAllToAll(send.data(), result.data(), count, type, comm, nullptr);
  if (rc != braidSuccess) return Fail(comm, rc);
  for (int s = 0; s < n; ++s) {
    std::string wrong = CheckBlock(type, result.data(), s, count, s, rank);
    if (!wrong.empty()) return wrong;
  }
  if (!in_place && send != original) return "sendbuff was modified";
  return CheckGuard(result, "recvbuff");
}

std::string Gather(braidComm_t comm, int rank, int n, int root, braidDataType_t type, size_t count,
                   bool in_place) {
  const size_t elem = TypeSize(type);
  if (in_place) {
    // NCCL's in-place gather: sendbuff == recvbuff + rank * count on every rank.
    std::vector<char> buffer = Blank(type, n * count);
    FillBlock(type, buffer.data(), rank, count, rank, root);
    braidResult_t rc = braidGather(buffer.data() + rank * count * elem, buffer.data(), count, type,
                                   root, comm, nullptr);
    if (rc != braidSuccess) return Fail(comm, rc);
    for (int s = 0; s < n; ++s) {
      std::string wrong = rank == root || s == rank
                              ? CheckBlock(type, buffer.data(), s, count, s, root)
                              : CheckUntouched(type, buffer, s, count);
      if (!wrong.empty()) return wrong;
    }
    return CheckGuard(buffer, "recvbuff");
  }
  std::vector<char> send = Blank(type, count);
  FillBlock(type, send.data(), 0, count, rank, root);
  const std::vector<char> original = send;
  std::vector<char> recv = rank == root ? Blank(type, n * count) : std::vector<char>();
  // Non-roots pass NULL: only the root's recvbuff is used.
  braidResult_t rc = braidGather(send.data(), rank == root ? recv.data() : nullptr, count, type,
                                 root, comm, nullptr);
  if (rc != braidSuccess) return Fail(comm, rc);
  if (send != original) return "sendbuff was modified";
  if (rank != root) return "";
  for (int s = 0; s < n; ++s) {
    std::string wrong = CheckBlock(type, recv.data(), s, count, s, root);
    if (!wrong.empty()) return wrong;
  }
  return CheckGuard(recv, "recvbuff");
}

std::string Scatter(braidComm_t comm, int rank, int n, int root, braidDataType_t type, size_t count,
                    bool in_place) {
  const size_t elem = TypeSize(type);
  if (in_place) {
    // NCCL's in-place scatter: recvbuff == sendbuff + rank * count on every rank.
    std::vector<char> buffer = Blank(type, n * count);
    if (rank == root) {
      for (int p = 0; p < n; ++p) FillBlock(type, buffer.data(), p, count, root, p);
    }
    braidResult_t rc = braidScatter(buffer.data(), buffer.data() + rank * count * elem, count, type,
                                    root, comm, nullptr);
    if (rc != braidSuccess) return Fail(comm, rc);
    for (int p = 0; p < n; ++p) {
      std::string wrong = rank == root || p == rank
                              ? CheckBlock(type, buffer.data(), p, count, root, p)
                              : CheckUntouched(type, buffer, p, count);
      if (!wrong.empty()) return wrong;
    }
    return CheckGuard(buffer, "sendbuff");
  }
  std::vector<char> send;
  if (rank == root) {
    send = Blank(type, n * count);
    for (int p = 0; p < n; ++p) FillBlock(type, send.data(), p, count, root, p);
  }
  const std::vector<char> original = send;
  std::vector<char> recv = Blank(type, count);
  // Non-roots pass NULL: only the root's sendbuff is read.
  braidResult_t rc = braidScatter(rank == root ? send.data() : nullptr, recv.data(), count, type,
                                  root, comm, nullptr);
  if (rc != braidSuccess) return Fail(comm, rc);
  if (send != original) return "sendbuff was modified";
  std::string wrong = CheckBlock(type, recv.data(), 0, count, root, rank);
  return wrong.empty() ? CheckGuard(recv, "recvbuff") : wrong;
}

std::string Describe(const char* what, braidDataType_t type, size_t count, bool in_place,
                     int root) {
  return std::string(what) + " " + TypeName(type) + " count " + std::to_string(count) +
         (root >= 0 ? " root " + std::to_string(root) : std::string()) +
         (in_place ? " in place" : " out of place") + ": ";
}

std::string InitComm(braidComm_t* comm, int rank, int n, const braidUniqueId& id, int chunk_bytes) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.chunkBytes = chunk_bytes;
  config.timeoutMs = 60000;
  braidResult_t rc = braidCommInitRankConfig(comm, n, id, rank, &config);
  return rc == braidSuccess ? "" : "init failed: " + Fail(nullptr, rc);
}

// The whole sweep on one rank; "" or the first failure.
std::string Sweep(int rank, int n, const braidUniqueId& id, const SweepOptions& options) {
  braidComm_t comm = nullptr;
  std::string failure = InitComm(&comm, rank, n, id, options.chunk_bytes);
  if (!failure.empty()) return failure;
  for (size_t count : kAllCounts) {
    if (count > 4096 && !options.large) continue;
    for (int t = 0; t < braidNumTypes && failure.empty(); ++t) {
      auto type = static_cast<braidDataType_t>(t);
      for (bool in_place : {false, true}) {
        if (options.alltoall) {
          std::string wrong = AllToAll(comm, rank, n, type, count, in_place);
          if (!wrong.empty()) {
            failure = Describe("alltoall", type, count, in_place, -1) + wrong;
            break;
          }
        }
        for (int root = 0; options.rooted && root < n && failure.empty(); ++root) {
          std::string wrong = Gather(comm, rank, n, root, type, count, in_place);
          if (!wrong.empty()) failure = Describe("gather", type, count, in_place, root) + wrong;
          if (failure.empty()) {
            wrong = Scatter(comm, rank, n, root, type, count, in_place);
            if (!wrong.empty()) failure = Describe("scatter", type, count, in_place, root) + wrong;
          }
        }
        if (!failure.empty()) break;
      }
    }
  }
  braidCommDestroy(comm);
  return failure;
}

braidUniqueId NewId() {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  return id;
}

void RunThreadSweep(int size, const SweepOptions& options) {
  braidUniqueId id = NewId();
  auto results = RunThreads(size, [&](int rank, int n) { return Sweep(rank, n, id, options); });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

void RunProcessSweep(int size, const SweepOptions& options) {
  braidUniqueId id = NewId();
  auto results = RunProcesses(
      size, [&](int rank, int n) { return Sweep(rank, n, id, options); }, 120000);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

}  // namespace

TEST_CASE("alltoall matches the serial reference, ranks as threads", "[alltoall][threads]") {
  const int size = GENERATE(1, 2, 3, 4, 5, 8);
  CAPTURE(size);
  SweepOptions options;
  options.alltoall = true;
  options.chunk_bytes = 8192;
  RunThreadSweep(size, options);
}

TEST_CASE("alltoall matches the serial reference, ranks as processes", "[alltoall][processes]") {
  const int size = GENERATE(3, 4);
  CAPTURE(size);
  SweepOptions options;
  options.alltoall = true;
  RunProcessSweep(size, options);
}

TEST_CASE("alltoall in place with blocks larger than the staging budget", "[alltoall][threads]") {
  // 4 ranks × 3 MiB + 1 blocks with a 64 KiB chunk: 49 slices, the last one a single byte.
  braidUniqueId id = NewId();
  auto results = RunThreads(4, [&](int rank, int n) -> std::string {
    braidComm_t comm = nullptr;
    std::string failure = InitComm(&comm, rank, n, id, 64 * 1024);
    if (failure.empty()) failure = AllToAll(comm, rank, n, braidUint8, (size_t{3} << 20) + 1, true);
    braidCommDestroy(comm);
    return failure;
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("gather and scatter match the serial reference, ranks as threads", "[rooted][threads]") {
  const int size = GENERATE(1, 2, 3, 4, 5, 8);
  CAPTURE(size);
  SweepOptions options;
  options.rooted = true;
  options.chunk_bytes = 8192;
  RunThreadSweep(size, options);
}

TEST_CASE("gather and scatter match the serial reference, ranks as processes",
          "[rooted][processes]") {
  const int size = GENERATE(3, 4);
  CAPTURE(size);
  SweepOptions options;
  options.rooted = true;
  RunProcessSweep(size, options);
}

// Each rank bumps iteration i's counter right before barrier i and reads it right after: a
// barrier that let a rank through early shows a count below n. A rotating straggler sleeps
// before arriving so early leavers have time to be seen.
std::string BarrierRounds(int rank, int n, const braidUniqueId& id, std::atomic<int>* counters,
                          int iterations) {
  braidComm_t comm = nullptr;
  std::string failure = InitComm(&comm, rank, n, id, BRAID_CONFIG_UNDEF_INT);
  if (!failure.empty()) return failure;
  for (int i = 0; i < iterations && failure.empty(); ++i) {
    if (i % 10 == 0 && rank == (i / 10) % n)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    counters[i].fetch_add(1);
    braidResult_t rc = braidBarrier(comm, nullptr);
    if (rc != braidSuccess) {
      failure = "barrier " + std::to_string(i) + ": " + Fail(comm, rc);
    } else if (int seen = counters[i].load(); seen != n) {
      failure = "left barrier " + std::to_string(i) + " after only " + std::to_string(seen) +
                " of " + std::to_string(n) + " ranks arrived";
    }
  }
  braidCommDestroy(comm);
  return failure;
}

TEST_CASE("barrier holds every rank until all arrived, ranks as threads", "[barrier][threads]") {
  const int size = GENERATE(1, 2, 3, 4, 5, 8);
  CAPTURE(size);
  constexpr int kIterations = 300;
  std::vector<std::atomic<int>> counters(kIterations);
  braidUniqueId id = NewId();
  auto results = RunThreads(size, [&](int rank, int n) {
    return BarrierRounds(rank, n, id, counters.data(), kIterations);
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("barrier holds every rank until all arrived, ranks as processes",
          "[barrier][processes]") {
  const int size = GENERATE(3, 5);
  CAPTURE(size);
  constexpr int kIterations = 200;
  // Counters in memory shared across fork().
  void* shared = mmap(nullptr, kIterations * sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* counters = new (shared) std::atomic<int>[kIterations]();
  braidUniqueId id = NewId();
  auto results = RunProcesses(
      size, [&](int rank, int n) { return BarrierRounds(rank, n, id, counters, kIterations); },
      120000);
  munmap(shared, kIterations * sizeof(std::atomic<int>));
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

}  // namespace braid::testing
