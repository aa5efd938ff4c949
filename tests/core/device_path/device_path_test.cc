// The device path (core/device_path) end to end through braid.h, on the CPU SIMULATION of the
// device seam (core/device/simulated_device.h): device buffers and streams in every collective
// and in send/recv, at 2-4 ranks as threads and as processes, over shm and tcp, against the
// serial references, staged whole and in several pipelined steps (with the host path's bits
// where the algorithm's order allows it); the refusals (host and device buffers mixed, a captured stream); abort
// releasing a stream blocked on a peer that never comes; a lost peer reaching
// braidCommGetAsyncError naming the rank. A pass here says the machinery above the seam is right
// (ordering, staging, flags, progress thread, errors), not that CUDA behaves so: the same checks
// run on the GPU in //tests/gpu:device_collectives_gpu_test.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/device/simulated_device.h"
#include "core/device_path/simulated_for_tests.h"
#include "tests/collectives/collective_checks.h"
#include "tests/core/device/shareable_mappings.h"
#include "tests/core/device_path/device_checks.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Staged whole (the default chunk, 1 MiB, holds every message here) and in several pipelined
// steps: deviceChunkBytes 1500 cuts 2999 float32 into 8 steps (7 of 375 and one of 374) and each
// per-rank block of the other collectives into 17-33 steps, so step boundaries fall inside every
// message and the last step is short; every element is checked against the serial references, so
// a step staged into the wrong slot or at the wrong offset fails.
TEST_CASE("every collective and send/recv on simulated device buffers", "[device_path][pipeline]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  REQUIRE(sim->IsSimulation());
  const int size = GENERATE(2, 3, 4);
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  // "": every transport, so device work links this host's ranks over cuda_ipc.
  const char* transports = GENERATE("shm", "tcp", "");
  const bool pipelined = GENERATE(false, true);
  CommJob job;
  job.size = size;
  job.ranks = ranks;
  job.config.transports = transports;
  if (pipelined) job.config.deviceChunkBytes = 1500;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream: " + stream.status().ToString();
    // An odd count, so blocks are not multiples of anything.
    std::string wrong = RunAllDeviceChecks(comm, rank, n, pipelined ? 2999 : 1031, *sim, stream.value().get());
    if (!wrong.empty()) return wrong;
    // NULL stream: the legacy default stream, as in NCCL. Only where ranks are processes: ranks
    // that are threads of one process would share that one stream, and a stream that must wait
    // for rank 0's collective before it reaches rank 1's deadlocks them (so it would on a GPU).
    if (ranks == Ranks::kProcesses) {
      Call call;
      call.coll = Coll::kAllReduce;
      call.count = 4099;
      wrong = RunDeviceCheck(comm, rank, n, call, *sim, nullptr);
      if (!wrong.empty()) return wrong;
    }
    // Count 0 is legal and enqueues nothing.
    auto empty = sim->Allocate(64);
    BRAID_TRY(braidAllReduce(empty.value()->data(), empty.value()->data(), 0, braidFloat32, braidSum, comm,
                             stream.value()->native()),
              "count 0");
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

// Float32 sums of values that are not exact, so any change of operand order shows in the bits.
// Where the allreduce algorithm folds the ranks in one order whatever an element's place (rd,
// rhd), the pipelined result must be bitwise the whole message's host result; with the ring,
// whose fold starts at another rank in each segment, it must be bitwise the host allreduce run
// step by step over the same shares (each step is that host collective).
TEST_CASE("pipelined device allreduce gives the host path's bits", "[device_path][pipeline]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const char* algo = GENERATE("allreduce:rd", "allreduce:rhd", "allreduce:ring");
  const bool by_steps = std::string(algo) == "allreduce:ring";
  const int size = GENERATE(3, 4);
  constexpr size_t kCount = 5003;
  constexpr size_t kPerStep = 250;  // 1000 bytes of float32: 21 steps, the last of 3
  CommJob job;
  job.size = size;
  job.config.transports = "shm";
  job.config.algo = algo;
  job.config.deviceChunkBytes = static_cast<int>(kPerStep * sizeof(float));
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    std::vector<float> input(kCount);
    uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1);
    for (float& v : input) {  // xorshift: values of every magnitude in [-1, 1) * 2^k
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = static_cast<float>(static_cast<int64_t>(x >> 11) % 2000001 - 1000000) * 1e-6f *
          static_cast<float>(1 << (x % 13));
    }
    // The host path's result: the whole message, or step by step.
    std::vector<float> host(kCount);
    for (size_t a = 0; a < kCount; a += by_steps ? kPerStep : kCount) {
      const size_t m = std::min(by_steps ? kPerStep : kCount, kCount - a);
      BRAID_TRY(braidAllReduce(input.data() + a, host.data() + a, m, braidFloat32, braidSum, comm, nullptr),
                "host allreduce");
    }
    auto dev = sim->Allocate(kCount * sizeof(float));
    auto stream = sim->NewStream();
    if (!dev.ok() || !stream.ok()) return "simulated device: allocation failed";
    std::vector<float> got(kCount);
    device::Stream& s = *stream.value();
    if (!s.Copy(dev.value()->data(), input.data(), kCount * sizeof(float)).ok()) return "copy in failed";
    BRAID_TRY(braidAllReduce(dev.value()->data(), dev.value()->data(), kCount, braidFloat32, braidSum, comm, s.native()),
              "device allreduce");
    if (!s.Copy(got.data(), dev.value()->data(), kCount * sizeof(float)).ok()) return "copy out failed";
    Status synced = s.Synchronize(Deadline::AfterMs(60000));
    if (!synced.ok()) return "synchronize: " + synced.ToString();
    size_t differ = 0, first = kCount;
    for (size_t i = 0; i < kCount; ++i) {
      if (std::memcmp(&got[i], &host[i], sizeof(float)) != 0) {
        ++differ;
        first = std::min(first, i);
      }
    }
    if (differ != 0) {
      return std::to_string(differ) + " elements differ from the host path's bits, the first at " +
             std::to_string(first) + ": " + std::to_string(got[first]) + " against " + std::to_string(host[first]);
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

// Send/recv batches are cut per transfer (staged_op.h): with 1500-byte steps the transfers of one
// batch run from 1 to 24 pieces, and both ends must cut each alike for every element to arrive.
TEST_CASE("device send/recv batches cut into pieces, unevenly per transfer", "[device_path][pipeline]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const int size = GENERATE(2, 3, 4);
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  const char* transports = GENERATE("shm", "tcp", "");
  const int chunk = GENERATE(1500, 0);  // 375 float32 a piece; 0: every transfer whole
  CommJob job;
  job.size = size;
  job.ranks = ranks;
  job.config.transports = transports;
  job.config.deviceChunkBytes = chunk;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream: " + stream.status().ToString();
    return RunDeviceUnevenBatch(comm, rank, n, 375, *sim, stream.value().get());
  });
  BRAID_CHECK_RANKS(results);
}

// Counts that differ between a send and its receive still fail, naming both sizes, once both
// ends cut the transfer (the first pieces agree in size; piece 0's header carries the count).
TEST_CASE("a device receive whose count differs from the send's fails naming both", "[device_path][pipeline]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  CommJob job;
  job.size = 2;
  job.config.transports = "shm";
  job.config.timeoutMs = 10000;
  job.config.deviceChunkBytes = 1500;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    auto dev = sim->Allocate(1 << 16);
    auto stream = sim->NewStream();
    if (!dev.ok() || !stream.ok()) return "simulated device: allocation failed";
    void* d = dev.value()->data();
    void* native = stream.value()->native();
    // Rank 0 sends 3000 float32 (8 pieces of 375), rank 1 receives 2625 (7 pieces of 375): every
    // piece the receiver takes has the size the sender gave it, so only the count can tell.
    const braidResult_t rc = rank == 0 ? braidSend(d, 3000, braidFloat32, 1, comm, native)
                                       : braidRecv(d, 2625, braidFloat32, 0, comm, native);
    if (rc != braidSuccess) return std::string("enqueue: ") + braidGetErrorString(rc);
    Status synced = stream.value()->Synchronize(Deadline::AfterMs(20000));
    if (!synced.ok()) return "the stream stayed blocked: " + synced.ToString();
    // Rank 0's pieces may all have gone out (shm takes small messages eagerly): only the
    // receiver is sure to see the mismatch.
    if (rank == 1) {
      braidResult_t async = braidSuccess;
      BRAID_TRY(braidCommGetAsyncError(comm, &async), "get async error");
      if (async == braidSuccess) return "the mismatched receive succeeded";
      (void)braidAllReduce(d, d, 16, braidFloat32, braidSum, comm, native);
      const std::string error = braidGetLastError(comm);
      if (!Contains(error, "10500 bytes from rank 0, which sent 12000 bytes")) return "rank 1's error: " + error;
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

// NCCL's semantics for one group over several streams of a communicator (stream_join.h).
TEST_CASE("one group over two streams waits for both and both wait for it", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const int size = GENERATE(2, 3);
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  const int chunk = GENERATE(1500, 0);
  CommJob job;
  job.size = size;
  job.ranks = ranks;
  job.config.transports = "shm";
  job.config.deviceChunkBytes = chunk;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    auto a = sim->NewStream();
    auto b = sim->NewStream();
    if (!a.ok() || !b.ok()) return "NewStream failed";
    for (int round = 0; round < 3; ++round) {  // the join's events are reused from group to group
      std::string wrong = RunDeviceTwoStreamGroup(comm, rank, n, 1031, *sim, *a.value(), *b.value());
      if (!wrong.empty()) return "round " + std::to_string(round) + ": " + wrong;
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a negative deviceChunkBytes is refused, naming the field", "[device_path][pipeline]") {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.deviceChunkBytes = -1;
  braidUniqueId id = NewId();
  braidComm_t comm = nullptr;
  CHECK(braidCommInitRankConfig(&comm, 1, id, 0, &config) == braidInvalidArgument);
  CHECK(comm == nullptr);
  CHECK(Contains(braidGetLastError(nullptr), "deviceChunkBytes"));
}

TEST_CASE("device work links this host's ranks over cuda_ipc; host work keeps its transports", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  // "": every transport (cuda_ipc then available to device work); "^cuda_ipc": excluded.
  const char* transports = GENERATE("", "^cuda_ipc");
  const bool cuda_ipc = std::string(transports).empty();
  CommJob job;
  job.size = 3;
  job.ranks = Ranks::kProcesses;  // one process per rank: its maps are its own links
  job.config.transports = transports;
  // The staged path's links; the direct path maps memory of its own (direct_collectives_test).
  job.config.deviceAlgo = "staged";
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    Call call;
    call.count = 4099;
    // Host buffers first: a communicator that has seen no device buffer maps no device memory.
    std::string wrong = RunAndCheck(comm, rank, n, call);
    if (!wrong.empty()) return "host allreduce: " + wrong;
    if (ShareableMappings() != 0) return "host work mapped shareable (cuda_ipc) memory";
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream: " + stream.status().ToString();
    wrong = RunDeviceCheck(comm, rank, n, call, *sim, stream.value().get());
    if (!wrong.empty()) return "device allreduce: " + wrong;
    const int mapped = ShareableMappings();
    // Two ring neighbours on this host, an inbox each way with each: 4 mappings; none without.
    if (cuda_ipc && mapped != 4) return "device work mapped " + std::to_string(mapped) + " shareable regions, not 4";
    if (!cuda_ipc && mapped != 0) return "cuda_ipc was excluded, yet " + std::to_string(mapped) + " regions are mapped";
    // Host work after device work: still right, and still over its own links.
    wrong = RunAndCheck(comm, rank, n, call);
    if (!wrong.empty()) return "host allreduce after device work: " + wrong;
    if (ShareableMappings() != mapped) return "host work changed the shareable mappings";
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("braidCommCuDevice: -1 until the first device call, then the device's ordinal", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  REQUIRE(sim->Ordinal() == 0);  // the simulation stands for the first GPU
  CommJob job;
  job.size = 2;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    int device = 7;
    BRAID_TRY(braidCommCuDevice(comm, &device), "braidCommCuDevice before");
    if (device != -1) return "before any device call: device " + std::to_string(device) + ", not -1";
    // Host calls leave it host-only.
    Call call;
    call.coll = Coll::kAllReduce;
    call.count = 17;
    std::string wrong = RunAndCheck(comm, rank, n, call);
    if (!wrong.empty()) return wrong;
    BRAID_TRY(braidCommCuDevice(comm, &device), "braidCommCuDevice after a host call");
    if (device != -1) return "after a host call: device " + std::to_string(device) + ", not -1";
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream: " + stream.status().ToString();
    wrong = RunDeviceCheck(comm, rank, n, call, *sim, stream.value().get());
    if (!wrong.empty()) return wrong;
    BRAID_TRY(braidCommCuDevice(comm, &device), "braidCommCuDevice after a device call");
    if (device != 0) return "after a device call: device " + std::to_string(device) + ", not 0";
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("host buffers with a NULL stream keep the host path while a device exists", "[device_path]") {
  device_path::UseSimulatedDeviceForTesting();
  CommJob job;
  job.size = 3;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    Call call;
    for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kScatter}) {
      call.coll = coll;
      call.count = 333;
      call.root = 1;
      std::string wrong = RunAndCheck(comm, rank, n, call);
      if (!wrong.empty()) return wrong;
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("host and device buffers in one call, and a stream with host buffers, are refused", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  braidComm_t comm = OneRankComm();
  auto dev = sim->Allocate(4096);
  REQUIRE(dev.ok());
  auto stream = sim->NewStream();
  REQUIRE(stream.ok());
  std::vector<float> host(1024, 1.0f);
  void* d = dev.value()->data();
  CHECK(braidAllReduce(d, host.data(), 16, braidFloat32, braidSum, comm, stream.value()->native()) ==
        braidInvalidArgument);
  std::string error = braidGetLastError(comm);
  INFO(error);
  CHECK(Contains(error, "sendbuff"));
  CHECK(Contains(error, "is device memory but recvbuff"));
  CHECK(Contains(error, "is host memory"));
  CHECK(braidSend(host.data(), 4, braidFloat32, 0, comm, stream.value()->native()) == braidInvalidUsage);
  error = braidGetLastError(comm);
  CHECK(Contains(error, "stream is not NULL, but the buffers are host memory"));
  // A one-rank communicator stays usable after refused input: device buffers still work.
  CHECK(braidAllReduce(d, d, 16, braidFloat32, braidSum, comm, stream.value()->native()) == braidSuccess);
  CHECK(stream.value()->Synchronize(Deadline::AfterMs(10000)).ok());
  CHECK(braidCommDestroy(comm) == braidSuccess);
}

TEST_CASE("a stream under capture is refused: capture is not supported yet", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  braidComm_t comm = OneRankComm();
  auto dev = sim->Allocate(4096);
  REQUIRE(dev.ok());
  auto stream = sim->NewStream();
  REQUIRE(stream.ok());
  void* d = dev.value()->data();
  REQUIRE(device::SimulateCapture(*stream.value(), true).ok());
  CHECK(braidAllReduce(d, d, 16, braidFloat32, braidSum, comm, stream.value()->native()) == braidInvalidUsage);
  const std::string error = braidGetLastError(comm);
  INFO(error);
  CHECK(Contains(error, "capture is not supported yet"));
  CHECK(braidBarrier(comm, stream.value()->native()) == braidInvalidUsage);
  REQUIRE(device::SimulateCapture(*stream.value(), false).ok());
  CHECK(braidAllReduce(d, d, 16, braidFloat32, braidSum, comm, stream.value()->native()) == braidSuccess);
  CHECK(stream.value()->Synchronize(Deadline::AfterMs(10000)).ok());
  CHECK(braidCommDestroy(comm) == braidSuccess);
}

TEST_CASE("abort releases a stream blocked on a peer that never comes", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  std::atomic<bool> rank0_done{false};
  CommJob job;
  job.size = 2;
  job.config.transports = "tcp";
  job.config.timeoutMs = 60000;  // far beyond the test: only the abort can release the stream
  job.config.deviceChunkBytes = 1024;  // the allreduce below in 4 pipelined steps
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 1) {  // never calls the allreduce; stays linked until rank 0 is done
      for (int i = 0; i < 2000 && !rank0_done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return rank0_done.load() ? "" : "rank 0 did not finish within 20 s";
    }
    struct Done {
      std::atomic<bool>* flag;
      ~Done() { flag->store(true); }
    } done{&rank0_done};
    auto dev = sim->Allocate(4096);
    auto stream = sim->NewStream();
    if (!dev.ok() || !stream.ok()) return "simulated device: allocation failed";
    void* d = dev.value()->data();
    // Returns although rank 1 never takes part: the calling thread does not wait for device work.
    BRAID_TRY(braidAllReduce(d, d, 1024, braidFloat32, braidSum, comm, stream.value()->native()), "allreduce");
    return CheckAbortReleases(comm, *stream.value());
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a lost peer during device work reaches braidCommGetAsyncError naming the rank", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  // "": every transport, so the device work's links are cuda_ipc. Rank 1 dies before its first
  // call (its peers wait for its cuda_ipc address and must learn of the loss from their other
  // links, well inside the timeout), or after a first device allreduce has linked it (the loss
  // is seen on live cuda_ipc links).
  const auto kill_point = GENERATE(std::make_pair("shm", false), std::make_pair("tcp", false),
                                   std::make_pair("", false), std::make_pair("", true));
  const char* transports = kill_point.first;
  const bool die_after_first = kill_point.second;
  CommJob job;
  job.size = 3;
  job.ranks = Ranks::kProcesses;
  job.config.transports = transports;
  job.config.timeoutMs = 30000;
  job.config.deviceChunkBytes = 4096;  // the allreduce below in 8 pipelined steps
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 1 && !die_after_first) kill(getpid(), SIGKILL);
    auto dev = sim->Allocate(1 << 16);
    auto stream = sim->NewStream();
    if (!dev.ok() || !stream.ok()) return "simulated device: allocation failed";
    void* d = dev.value()->data();
    if (die_after_first) {
      BRAID_TRY(braidAllReduce(d, d, 8192, braidFloat32, braidSum, comm, stream.value()->native()), "first allreduce");
      Status first = stream.value()->Synchronize(Deadline::AfterMs(20000));
      if (!first.ok()) return "first allreduce: " + first.ToString();
      if (rank == 1) kill(getpid(), SIGKILL);
    }
    BRAID_TRY(braidAllReduce(d, d, 8192, braidFloat32, braidSum, comm, stream.value()->native()), "allreduce");
    // Released by the progress thread once the collective fails (never left blocked).
    Status synced = stream.value()->Synchronize(Deadline::AfterMs(20000));
    if (!synced.ok()) return "the stream stayed blocked after the peer died: " + synced.ToString();
    return CheckLossReported(comm, d, stream.value()->native(), "rank 1");
  });
  REQUIRE(results.size() == 3);
  CHECK(results[1] == "killed by signal 9");
  results[1] = "";
  BRAID_CHECK_RANKS(results);
}

}  // namespace
}  // namespace braid::testing
