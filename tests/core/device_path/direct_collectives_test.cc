// The device path's DIRECT collectives (core/device_path/direct_collectives.h) through braid.h on
// the CPU SIMULATION of the device seam (core/device/simulated_device.h): allreduce, reduce,
// allgather, broadcast and reducescatter at 2-4 ranks as threads and as processes, in and out of
// place, one-shot and two-shot sizes, several 4 MiB steps with a short last one; float32 sums of
// inexact values bitwise equal on every rank and to a fold in rank order; BRAID_DEVICE_ALGO's
// choice; staged and direct work ordered on one stream; abort releasing a stream blocked on a
// peer that never calls; a SIGKILLed rank named. A pass says the flag protocol and the machinery
// above the seam are right, not that CUDA behaves so (the GPU run: tests/gpu).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/device/simulated_device.h"
#include "core/device_path/direct_collectives.h"
#include "core/device_path/simulated_for_tests.h"
#include "tests/collectives/collective_checks.h"
#include "tests/core/device/shareable_mappings.h"
#include "tests/core/device_path/device_checks.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

using device_path::DirectCollectives;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Elements of a 4 MiB slot, per datatype size.
constexpr size_t kSlotFloats = DirectCollectives::kSlotBytes / sizeof(float);
constexpr size_t kSlotBytes = DirectCollectives::kSlotBytes;
// float32 counts: one step, one-shot; one step, two-shot; three steps (two-shot), the last short.
constexpr size_t kOneShot = 1031;
constexpr size_t kTwoShot = DirectCollectives::kTwoShotFromBytes / sizeof(float) + 12345;
constexpr size_t kThreeSteps = 2 * kSlotFloats + 4099;
static_assert(kOneShot * sizeof(float) < DirectCollectives::kTwoShotFromBytes, "one-shot size");
static_assert(kTwoShot < kSlotFloats, "two-shot in one step");

// The direct collectives at every size class: {collective, datatype, op, count, in place}.
struct Shape {
  Coll coll;
  braidDataType_t type;
  braidRedOp_t op;
  size_t count;
  bool in_place;
};
std::vector<Call> DirectCalls(int size) {
  std::vector<Shape> shapes;
  for (bool in_place : {false, true}) {
    for (size_t count : {kOneShot, kTwoShot}) {
      shapes.push_back({Coll::kAllReduce, braidFloat32, braidSum, count, in_place});
      shapes.push_back({Coll::kAllReduce, braidFloat32, braidAvg, count, in_place});
    }
    shapes.push_back({Coll::kAllReduce, braidInt8, braidMax, kOneShot, in_place});
    shapes.push_back({Coll::kAllReduce, braidInt8, braidMax, DirectCollectives::kTwoShotFromBytes + 7, in_place});
    shapes.push_back({Coll::kReduce, braidFloat32, braidSum, kOneShot, in_place});
    shapes.push_back({Coll::kReduce, braidInt8, braidMax, kOneShot, in_place});
    shapes.push_back({Coll::kAllGather, braidFloat32, braidSum, kOneShot, in_place});
    shapes.push_back({Coll::kBroadcast, braidFloat32, braidSum, kOneShot, in_place});
    shapes.push_back({Coll::kReduceScatter, braidFloat32, braidSum, kOneShot, in_place});
    shapes.push_back({Coll::kReduceScatter, braidInt8, braidMax, kOneShot, in_place});
    shapes.push_back({Coll::kReduceScatter, braidFloat32, braidAvg, kOneShot, in_place});
  }
  // Several steps, the last one short (in place where a step's output overlaps later inputs).
  shapes.push_back({Coll::kAllReduce, braidFloat32, braidSum, kThreeSteps, false});
  shapes.push_back({Coll::kAllReduce, braidFloat32, braidSum, kThreeSteps, true});
  shapes.push_back({Coll::kReduceScatter, braidFloat32, braidSum, 2 * (kSlotFloats / size) + 77, true});
  shapes.push_back({Coll::kAllReduce, braidInt8, braidMax, kSlotBytes + 1001, false});
  shapes.push_back({Coll::kReduce, braidFloat32, braidSum, kSlotFloats + 77, false});
  shapes.push_back({Coll::kAllGather, braidFloat32, braidSum, kSlotFloats + 77, true});
  shapes.push_back({Coll::kBroadcast, braidFloat32, braidSum, kSlotFloats + 77, false});
  shapes.push_back({Coll::kReduceScatter, braidFloat32, braidSum, 2 * (kSlotFloats / size) + 77, false});
  std::vector<Call> calls(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    calls[i].coll = shapes[i].coll;
    calls[i].type = shapes[i].type;
    calls[i].op = shapes[i].op;
    calls[i].count = shapes[i].count;
    calls[i].in_place = shapes[i].in_place;
    calls[i].root = size - 1;  // rooted ones at the last rank
  }
  return calls;
}

TEST_CASE("direct collectives on simulated device buffers", "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  REQUIRE(sim->IsSimulation());
  const int size = GENERATE(2, 3, 4);
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  CommJob job;
  job.size = size;
  job.ranks = ranks;  // every transport allowed: cuda_ipc's rule puts every rank on this host
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream: " + stream.status().ToString();
    for (const Call& call : DirectCalls(n)) {
      std::string wrong = RunDeviceCheck(comm, rank, n, call, *sim, stream.value().get());
      if (!wrong.empty()) return wrong;
    }
    // The direct path maps each rank's slots once (its own and its n - 1 peers'), and no cuda_ipc
    // inbox: the staged path would have linked the ring neighbours instead (4 regions at 3 ranks).
    if (ranks == Ranks::kProcesses && ShareableMappings() != n) {
      return "direct work maps " + std::to_string(ShareableMappings()) + " shareable regions, not " + std::to_string(n);
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

// Values of every magnitude, so that a sum in another order differs in the last bits.
float Inexact(int rank, size_t i) {
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1) + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<int64_t>(x >> 11) % 2000001 - 1000000) * 1e-6f *
         static_cast<float>(1 << (x % 13));
}

TEST_CASE("direct allreduce and reduce of inexact float32 give every rank the bits of a fold in rank order",
          "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const int size = GENERATE(2, 3, 4);
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  CommJob job;
  job.size = size;
  job.ranks = ranks;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream failed";
    device::Stream& s = *stream.value();
    for (size_t count : {kOneShot, kTwoShot, kThreeSteps}) {
      for (bool reduce : {false, true}) {
        std::vector<float> input(count), expected(count), got(count, -1.0f);
        for (size_t i = 0; i < count; ++i) {
          input[i] = Inexact(rank, i);
          float acc = Inexact(0, i);  // the independent reference: a left fold in rank order
          for (int p = 1; p < n; ++p) acc += Inexact(p, i);
          expected[i] = acc;
        }
        auto in = sim->Allocate(count * sizeof(float));
        auto out = sim->Allocate(count * sizeof(float));
        if (!in.ok() || !out.ok()) return "allocation failed";
        if (!s.Copy(in.value()->data(), input.data(), count * sizeof(float)).ok()) return "copy in";
        const std::string what = std::string(reduce ? "reduce" : "allreduce") + " of " + std::to_string(count);
        if (reduce) {
          BRAID_TRY(braidReduce(in.value()->data(), out.value()->data(), count, braidFloat32, braidSum, 0, comm,
                                s.native()),
                    what);
        } else {
          BRAID_TRY(braidAllReduce(in.value()->data(), out.value()->data(), count, braidFloat32, braidSum, comm,
                                   s.native()),
                    what);
        }
        if (!s.Copy(got.data(), out.value()->data(), count * sizeof(float)).ok()) return "copy out";
        Status synced = s.Synchronize(Deadline::AfterMs(60000));
        if (!synced.ok()) return what + ": synchronize: " + synced.ToString();
        if (reduce && rank != 0) continue;
        for (size_t i = 0; i < count; ++i) {
          if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0) {
            return what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", the rank-order fold " +
                   std::to_string(expected[i]);
          }
        }
      }
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

// config.deviceAlgo (BRAID_DEVICE_ALGO): "staged" keeps the staged path, whose device work links
// the ring neighbours over cuda_ipc (4 regions at 3 ranks); the default and "direct" map the slots
// (3 regions). Results are checked either way.
TEST_CASE("deviceAlgo chooses the direct or the staged path", "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const char* algo = GENERATE("", "direct", "staged");
  CommJob job;
  job.size = 3;
  job.ranks = Ranks::kProcesses;
  if (*algo != '\0') job.config.deviceAlgo = algo;
  INFO(std::string("deviceAlgo '") + algo + "'");
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream failed";
    Call call;
    call.count = 4099;
    std::string wrong = RunDeviceCheck(comm, rank, n, call, *sim, stream.value().get());
    if (!wrong.empty()) return wrong;
    const int want = std::string(algo) == "staged" ? 4 : 3;
    if (ShareableMappings() != want) {
      return std::string("deviceAlgo '") + algo + "': " + std::to_string(ShareableMappings()) +
             " shareable regions mapped, not " + std::to_string(want);
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a deviceAlgo that is neither direct nor staged is refused naming it", "[device_path][direct]") {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.deviceAlgo = "fast";
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  braidComm_t comm = nullptr;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(Contains(braidGetLastError(nullptr), "deviceAlgo"));
}

// Staged and direct work on one stream, each reading what the one before wrote, with no
// synchronize between: alltoall (staged) -> allreduce (direct) -> gather (staged) -> broadcast
// (direct). Exact small integers, so the expected values are closed forms.
TEST_CASE("staged and direct device work run in issue order on one stream", "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  CommJob job;
  job.size = 3;
  job.ranks = ranks;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    constexpr size_t kPer = 1000;  // elements per peer block
    const size_t all = kPer * static_cast<size_t>(n);
    auto stream = sim->NewStream();
    auto a = sim->Allocate(all * sizeof(float));
    auto b = sim->Allocate(all * sizeof(float));
    auto c = sim->Allocate(all * n * sizeof(float));
    if (!stream.ok() || !a.ok() || !b.ok() || !c.ok()) return "allocation failed";
    device::Stream& s = *stream.value();
    std::vector<float> x(all);
    for (int p = 0; p < n; ++p) {  // block p for peer p: 100 * rank + p + i % 7
      for (size_t i = 0; i < kPer; ++i) x[p * kPer + i] = static_cast<float>(100 * rank + p + static_cast<int>(i % 7));
    }
    float* A = static_cast<float*>(a.value()->data());
    float* B = static_cast<float*>(b.value()->data());
    float* C = static_cast<float*>(c.value()->data());
    if (!s.Copy(A, x.data(), all * sizeof(float)).ok()) return "copy in";
    BRAID_TRY(braidAllToAll(A, B, kPer, braidFloat32, comm, s.native()), "alltoall");
    BRAID_TRY(braidAllReduce(B, B, all, braidFloat32, braidSum, comm, s.native()), "allreduce");
    BRAID_TRY(braidGather(B, C, all, braidFloat32, 0, comm, s.native()), "gather");
    BRAID_TRY(braidBroadcast(C, C, all * n, braidFloat32, 0, comm, s.native()), "broadcast");
    std::vector<float> got(all * n);
    if (!s.Copy(got.data(), C, got.size() * sizeof(float)).ok()) return "copy out";
    Status synced = s.Synchronize(Deadline::AfterMs(60000));
    if (!synced.ok()) return "synchronize: " + synced.ToString();
    // After the alltoall, block q of rank r holds rank q's block r: 100 q + r + i % 7. The
    // allreduce sums over r: element (q, i) = sum_r (100 q + r + i % 7). Every rank's copy is
    // that, gathered at rank 0 and broadcast back.
    for (int g = 0; g < n; ++g) {
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < kPer; ++i) {
          float want = 0;
          for (int r = 0; r < n; ++r) want += static_cast<float>(100 * q + r + static_cast<int>(i % 7));
          const float have = got[(g * n + q) * kPer + i];
          if (have != want) {
            return "copy " + std::to_string(g) + " block " + std::to_string(q) + " element " + std::to_string(i) +
                   ": " + std::to_string(have) + ", expected " + std::to_string(want);
          }
        }
      }
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

// Readers that come late: a slot is refilled only after every peer read its last use. Broadcast's
// readers and reduce's root announce nothing the writers wait for before refilling, so only the
// `consumed` flags hold the writers back; here the readers' streams are held 300 ms behind their
// application streams while the writers run 5 steps through 3 slots. Without the consumed wait
// the late reader finds step 4's data where step 1's was (checked: this test then fails).
TEST_CASE("a late reader holds the writers back until it has read a slot", "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  const bool reduce = GENERATE(false, true);
  CommJob job;
  job.size = 3;
  job.ranks = ranks;
  INFO(Describe(job) << (reduce ? ", reduce at the late root 2" : ", broadcast from 0, ranks 1 and 2 late"));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    constexpr size_t kCount = 4 * kSlotFloats + 99;  // 5 steps through 3 slots
    const bool late = reduce ? rank == n - 1 : rank != 0;
    auto stream = sim->NewStream();
    auto gate = sim->AllocateHost(64);
    auto in = sim->Allocate(kCount * sizeof(float));
    auto out = sim->Allocate(kCount * sizeof(float));
    if (!stream.ok() || !gate.ok() || !in.ok() || !out.ok()) return "allocation failed";
    device::Stream& s = *stream.value();
    auto* flag = static_cast<uint32_t*>(gate.value()->data());
    std::vector<float> input(kCount), got(kCount);
    for (size_t i = 0; i < kCount; ++i) input[i] = static_cast<float>((i % 100003) + 1000000 * rank);
    if (!s.Copy(in.value()->data(), input.data(), kCount * sizeof(float)).ok()) return "copy in";
    if (late && !s.WaitValue32(flag, 1).ok()) return "holding the stream";
    if (reduce) {
      BRAID_TRY(braidReduce(in.value()->data(), out.value()->data(), kCount, braidFloat32, braidSum, n - 1, comm,
                            s.native()),
                "reduce");
    } else {
      BRAID_TRY(braidBroadcast(in.value()->data(), out.value()->data(), kCount, braidFloat32, 0, comm, s.native()),
                "broadcast");
    }
    if (!s.Copy(got.data(), out.value()->data(), kCount * sizeof(float)).ok()) return "copy out";
    if (late) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      __atomic_store_n(flag, 1u, __ATOMIC_RELEASE);
    }
    Status synced = s.Synchronize(Deadline::AfterMs(60000));
    if (!synced.ok()) return "synchronize: " + synced.ToString();
    if (reduce && rank != n - 1) return "";
    for (size_t i = 0; i < kCount; ++i) {
      float want = static_cast<float>(i % 100003);
      if (reduce) want = static_cast<float>(n) * want + 1000000.0f * static_cast<float>(n * (n - 1) / 2);
      if (got[i] != want) {
        return "element " + std::to_string(i) + " (step " + std::to_string(i / kSlotFloats + 1) + ") is " +
               std::to_string(got[i]) + ", expected " + std::to_string(want);
      }
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

// A first direct allreduce of `count` float32 on `d` that every rank makes (the direct path's
// memory is exchanged there), synchronized. "" or what failed.
// A rank of the failure tests: `bytes` of simulated device memory and a stream of its own, linked
// to its peers by a first direct allreduce of `count` float32 that every rank completes.
struct LinkedRank {
  std::unique_ptr<device::Memory> memory;
  std::unique_ptr<device::Stream> stream;
  void* d = nullptr;
};

std::string LinkDirect(device::Device& sim, braidComm_t comm, size_t bytes, size_t count, LinkedRank* r) {
  auto memory = sim.Allocate(bytes);
  auto stream = sim.NewStream();
  if (!memory.ok() || !stream.ok()) return "simulated device: allocation failed";
  r->memory = std::move(memory).value();
  r->stream = std::move(stream).value();
  r->d = r->memory->data();
  const braidResult_t called = braidAllReduce(r->d, r->d, count, braidFloat32, braidSum, comm, r->stream->native());
  if (called != braidSuccess) return std::string("first allreduce: ") + braidGetLastError(comm);
  Status first = r->stream->Synchronize(Deadline::AfterMs(20000));
  return first.ok() ? "" : "first allreduce: " + first.ToString();
}

// The failure tests' second allreduce: enqueued on `stream` (the calling thread never waits), then
// the stream synchronised within `sync_ms`, which only a release of its waits can end before the
// peer does. "" with *seconds = how long enqueue and release took, or what went wrong.
std::string AllreduceUntilReleased(braidComm_t comm, device::Stream& stream, void* d, size_t count, int64_t sync_ms,
                                   double* seconds) {
  const auto start = std::chrono::steady_clock::now();
  const braidResult_t called = braidAllReduce(d, d, count, braidFloat32, braidSum, comm, stream.native());
  if (called != braidSuccess) return std::string("second allreduce: ") + braidGetLastError(comm);
  Status released = stream.Synchronize(Deadline::AfterMs(sync_ms));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return released.ok() ? "" : "the stream stayed blocked: " + released.ToString();
}

// The message the communicator's next call reports (it returns the error that broke it).
std::string NextCallError(braidComm_t comm, device::Stream& stream, void* d) {
  (void)braidAllReduce(d, d, 16, braidFloat32, braidSum, comm, stream.native());
  return braidGetLastError(comm);
}

TEST_CASE("abort releases a direct stream blocked on a peer that never calls", "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  CommJob job;
  job.size = 2;
  job.ranks = ranks;
  job.config.timeoutMs = 60000;  // far beyond the test: only the abort can release the stream
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    LinkedRank r;
    const std::string linked = LinkDirect(*sim, comm, kSlotBytes * 2, 1024, &r);
    if (!linked.empty()) return linked;
    void* d = r.d;
    if (rank == 1) {
      // Never calls the second one; stays until rank 0 has aborted (its socket says so), then
      // leaves without destroying anything rank 0 still maps.
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return "";
    }
    // Three steps, so the stream waits in the middle of the operation's flags.
    BRAID_TRY(braidAllReduce(d, d, kThreeSteps / 2, braidFloat32, braidSum, comm, r.stream->native()),
              "second allreduce");
    return CheckAbortReleases(comm, *r.stream);
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a direct operation a live peer never joins fails at the deadline, releasing the stream",
          "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  CommJob job;
  job.size = 2;
  job.config.timeoutMs = 1500;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    LinkedRank r;
    const std::string linked = LinkDirect(*sim, comm, 4096, 1024, &r);
    if (!linked.empty()) return linked;
    void* d = r.d;
    if (rank == 1) {  // alive, linked, and never joins the second allreduce
      std::this_thread::sleep_for(std::chrono::milliseconds(4000));
      return "";
    }
    double waited = 0;
    const std::string second = AllreduceUntilReleased(comm, *r.stream, d, 1024, 10000, &waited);
    if (!second.empty()) return second + " (past the deadline)";
    if (waited < 1.4) return "released after " + std::to_string(waited) + " s, before the 1.5 s deadline";
    braidResult_t async = braidSuccess;
    BRAID_TRY(braidCommGetAsyncError(comm, &async), "get async error");
    if (async != braidTimeout) return std::string("async error is ") + braidGetErrorString(async);
    const std::string error = NextCallError(comm, *r.stream, d);
    return Contains(error, "did not complete within 1500 ms") ? "" : "the error does not say so: " + error;
  });
  BRAID_CHECK_RANKS(results);
}

// A peer whose communicator breaks for a reason of its own (here bad input to a host call, which
// breaks a multi-rank communicator) releases its direct waits and says so: a rank waiting for it
// in a direct operation is released at once, naming it, not at its deadline (60 s). Checked: without
// the release in Communicator::Break this fails (rank 0 waits until rank 1's communicator goes).
TEST_CASE("a peer that breaks during direct work releases the ranks waiting for it", "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  CommJob job;
  job.size = 2;
  job.ranks = ranks;
  job.config.timeoutMs = 60000;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    LinkedRank r;
    const std::string linked = LinkDirect(*sim, comm, 4096, 1024, &r);
    if (!linked.empty()) return linked;
    void* d = r.d;
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 is waiting by then
      std::vector<float> host(16);
      const braidResult_t bad = braidAllReduce(host.data(), host.data(), 16, static_cast<braidDataType_t>(1234),
                                               braidSum, comm, nullptr);
      // Alive and its communicator not destroyed (a destroy would say goodbye, which releases rank
      // 0 too): only the release on breaking can free rank 0 within its 5 s.
      std::this_thread::sleep_for(std::chrono::milliseconds(6000));
      return bad == braidInvalidArgument ? "" : std::string("bad input returned ") + braidGetErrorString(bad);
    }
    double waited = 0;
    const std::string second = AllreduceUntilReleased(comm, *r.stream, d, 1024, 20000, &waited);
    if (!second.empty()) return second + " (after the peer broke)";
    if (waited > 5) return "released after " + std::to_string(waited) + " s";
    braidResult_t async = braidSuccess;
    BRAID_TRY(braidCommGetAsyncError(comm, &async), "get async error");
    if (async == braidSuccess) return "no async error after the peer broke";
    const std::string error = NextCallError(comm, *r.stream, d);
    return Contains(error, "rank 1") ? "" : "the error does not name rank 1: " + error;
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a rank killed during direct work is named by braidCommGetAsyncError", "[device_path][direct]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  CommJob job;
  job.size = 3;
  job.ranks = Ranks::kProcesses;
  job.config.timeoutMs = 30000;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    LinkedRank r;
    const std::string linked = LinkDirect(*sim, comm, kSlotBytes * 2, 8192, &r);
    if (!linked.empty()) return linked;
    void* d = r.d;
    if (rank == 1) kill(getpid(), SIGKILL);
    // Released by the watcher once the peer's socket closes without a goodbye, not at the timeout.
    double waited = 0;
    const std::string second = AllreduceUntilReleased(comm, *r.stream, d, kThreeSteps / 2, 20000, &waited);
    if (!second.empty()) return second + " (after the peer died)";
    if (waited > 10) return "the loss took " + std::to_string(waited) + " s to be seen";
    return CheckLossReported(comm, d, r.stream->native(), "rank 1");
  });
  REQUIRE(results.size() == 3);
  CHECK(results[1] == "killed by signal 9");
  results[1] = "";
  BRAID_CHECK_RANKS(results);
}

}  // namespace
}  // namespace braid::testing
