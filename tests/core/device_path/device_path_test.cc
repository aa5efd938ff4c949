// The device path (core/device_path) end to end through braid.h, on the CPU SIMULATION of the
// device seam (core/device/simulated_device.h): device buffers and streams in every collective
// and in send/recv, at 2-4 ranks as threads and as processes, over shm and tcp, against the
// serial references; the refusals (host and device buffers mixed, a captured stream); abort
// releasing a stream blocked on a peer that never comes; a lost peer reaching
// braidCommGetAsyncError naming the rank. A pass here says the machinery above the seam is right
// (ordering, staging, flags, progress thread, errors), not that CUDA behaves so: the same checks
// run on the GPU in //tests/gpu:device_collectives_gpu_test.
#include <signal.h>
#include <unistd.h>

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
#include "tests/core/device_path/device_checks.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("every collective and send/recv on simulated device buffers", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  REQUIRE(sim->IsSimulation());
  const int size = GENERATE(2, 3, 4);
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  const char* transports = GENERATE("shm", "tcp");
  CommJob job;
  job.size = size;
  job.ranks = ranks;
  job.config.transports = transports;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int n) -> std::string {
    auto stream = sim->NewStream();
    if (!stream.ok()) return "NewStream: " + stream.status().ToString();
    // An odd count, so blocks are not multiples of anything.
    std::string wrong = RunAllDeviceChecks(comm, rank, n, 1031, *sim, stream.value().get());
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
    Status blocked = stream.value()->Synchronize(Deadline::AfterMs(300));
    if (blocked.code() != Code::kTimeout) return "the stream was not blocked on the missing peer: " + blocked.ToString();
    BRAID_TRY(braidCommAbort(comm), "abort");
    Status released = stream.value()->Synchronize(Deadline::AfterMs(5000));
    if (!released.ok()) return "the stream stayed blocked after braidCommAbort: " + released.ToString();
    braidResult_t async = braidSuccess;
    BRAID_TRY(braidCommGetAsyncError(comm, &async), "get async error");
    if (async != braidAborted) return std::string("async error after abort is ") + braidGetErrorString(async);
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("a lost peer during device work reaches braidCommGetAsyncError naming the rank", "[device_path]") {
  device::Device* sim = device_path::UseSimulatedDeviceForTesting();
  const char* transports = GENERATE("shm", "tcp");
  CommJob job;
  job.size = 3;
  job.ranks = Ranks::kProcesses;
  job.config.transports = transports;
  job.config.timeoutMs = 30000;
  INFO(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 1) kill(getpid(), SIGKILL);
    auto dev = sim->Allocate(1 << 16);
    auto stream = sim->NewStream();
    if (!dev.ok() || !stream.ok()) return "simulated device: allocation failed";
    void* d = dev.value()->data();
    BRAID_TRY(braidAllReduce(d, d, 8192, braidFloat32, braidSum, comm, stream.value()->native()), "allreduce");
    // Released by the progress thread once the collective fails (never left blocked).
    Status synced = stream.value()->Synchronize(Deadline::AfterMs(20000));
    if (!synced.ok()) return "the stream stayed blocked after the peer died: " + synced.ToString();
    braidResult_t async = braidSuccess;
    BRAID_TRY(braidCommGetAsyncError(comm, &async), "get async error");
    if (async != braidRemoteError) return std::string("async error is ") + braidGetErrorString(async);
    // The next call returns the same error, whose message leads with the failed rank.
    const braidResult_t next = braidAllReduce(d, d, 16, braidFloat32, braidSum, comm, stream.value()->native());
    const std::string error = braidGetLastError(comm);
    if (next != braidRemoteError || !Contains(error, "rank 1")) {
      return std::string("the next call: ") + braidGetErrorString(next) + ": " + error;
    }
    return "";
  });
  REQUIRE(results.size() == 3);
  CHECK(results[1] == "killed by signal 9");
  results[1] = "";
  BRAID_CHECK_RANKS(results);
}

}  // namespace
}  // namespace braid::testing
