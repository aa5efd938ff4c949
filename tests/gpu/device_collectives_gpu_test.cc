// Every collective and send/recv on CUDA device buffers through braid.h, on the one GPU, at 1, 2,
// 4 and 8 ranks, as processes and as threads: the checks CI runs on the simulated device
// (tests/core/device_path/device_checks.h), here on the real CUDA device (//bindings/c:braid_cuda
// registers it). With every transport allowed the ranks share one host, so allreduce, reduce,
// allgather, broadcast and reducescatter take the direct path (device memory end to end, stream
// flags; core/device_path/direct_collectives.h), once at a one-step count and, at 2 and 4 ranks,
// at a count of three 4 MiB steps; the rest of the device work is staged over cuda_ipc. The same
// jobs with deviceAlgo "staged" stage everything over cuda_ipc (2 and 4 ranks). The jobs
// are run again pipelined (BRAID_DEVICE_CHUNK_BYTES small: 64 KiB steps, an odd count, so every
// message is several steps with boundaries inside it) at 2 and 4 ranks over shm only
// (BRAID_TRANSPORTS ^cuda_ipc), so a failure names which of the two it is. Exit
// 0 passed, 1 failed, 77 no device. --quick (under compute-sanitizer): 1 and 2 ranks, a smaller
// count, pipelined in 1000-byte steps at 2 ranks.
//
// Why processes first and the device probed in a child: a CUDA context does not survive fork, so
// this process touches CUDA only after its last fork (the thread jobs come last).
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "core/device_path/process_device.h"
#include "tests/core/device_path/device_checks.h"
#include "tests/gpu/gpu_check.h"
#include "tests/harness/multi_rank.h"

namespace {

constexpr const char* kName = "device_collectives_gpu_test";

// Probes for a device in a child process (see above): true if there is one.
bool DeviceInChild() {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    const bool have = braid::gpu_test::HaveDevice(kName);
    std::fflush(stdout);  // _exit does not flush
    _exit(have ? 0 : braid::gpu_test::kExitSkipped);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// One job: `size` ranks of one communicator, each running every device check on its own stream (plus a
// group over that stream and a second one, and, pipelined, send/recv batches cut into pieces),
// then (processes only: threads would share it) the NULL stream. `chunk_bytes`: the
// communicator's deviceChunkBytes (BRAID_CONFIG_UNDEF_INT: the default); `transports`: its
// BRAID_TRANSPORTS (null: every transport); `device_algo`: its deviceAlgo (null: the default, direct).
std::vector<std::string> RunJob(int size, bool processes, size_t count, int chunk_bytes, const char* transports,
                                const char* device_algo = nullptr) {
  braidUniqueId id;
  if (braidGetUniqueId(&id) != braidSuccess) return {std::string("braidGetUniqueId: ") + braidGetLastError(nullptr)};
  auto body = [&](int rank, int n) -> std::string {
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.timeoutMs = 120000;
    config.deviceChunkBytes = chunk_bytes;
    config.transports = transports;
    config.deviceAlgo = device_algo;
    braidComm_t comm = nullptr;
    if (braidCommInitRankConfig(&comm, n, id, rank, &config) != braidSuccess) {
      return std::string("init: ") + braidGetLastError(nullptr);
    }
    std::string wrong;
    auto device = braid::device_path::ProcessDevice();
    if (!device.ok()) {
      wrong = "ProcessDevice: " + device.status().ToString();
    } else {
      auto stream = device.value()->NewStream();
      if (!stream.ok()) {
        wrong = "NewStream: " + stream.status().ToString();
      } else {
        wrong = braid::testing::RunAllDeviceChecks(comm, rank, n, count, *device.value(), stream.value().get());
        int cu_device = -2;
        if (wrong.empty() && (braidCommCuDevice(comm, &cu_device) != braidSuccess ||
                              cu_device != device.value()->Ordinal())) {
          wrong = "braidCommCuDevice after device work: " + std::to_string(cu_device) + ", not " +
                  std::to_string(device.value()->Ordinal());
        }
        // Send/recv batches cut into pieces (pipelined jobs: pieces of chunk_bytes), and one group
        // over two streams (NCCL's semantics: stream_join.h).
        if (wrong.empty() && chunk_bytes > 0) {
          wrong = braid::testing::RunDeviceUnevenBatch(comm, rank, n, static_cast<size_t>(chunk_bytes) / sizeof(float),
                                                       *device.value(), stream.value().get());
        }
        auto second = device.value()->NewStream();
        if (wrong.empty() && !second.ok()) wrong = "NewStream: " + second.status().ToString();
        if (wrong.empty()) {
          wrong = braid::testing::RunDeviceTwoStreamGroup(comm, rank, n, count, *device.value(), *stream.value(),
                                                          *second.value());
        }
        if (wrong.empty() && processes) {
          braid::testing::Call call;
          call.count = count * 3 + 1;
          wrong = braid::testing::RunDeviceCheck(comm, rank, n, call, *device.value(), nullptr);
        }
      }
    }
    if (braidCommDestroy(comm) != braidSuccess && wrong.empty()) wrong = "destroy failed";
    return wrong;
  };
  return processes ? braid::testing::RunProcesses(size, body, 300000) : braid::testing::RunThreads(size, body, 300000);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick |= std::strcmp(argv[i], "--quick") == 0;
  if (!DeviceInChild()) {
    std::printf("%s: SKIPPED: no CUDA device\n", kName);
    return braid::gpu_test::kExitSkipped;
  }
  braid::gpu_test::Checks checks(kName);
  const std::vector<int> sizes = quick ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 4, 8};
  const size_t count = quick ? 257 : 1 << 18;
  const std::vector<int> pipelined_sizes = quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  const int pipelined_chunk = quick ? 1000 : 64 * 1024;
  const size_t pipelined_count = quick ? 997 : (1 << 18) + 13;
  // Direct-path jobs besides the one-step ones: three 4 MiB steps (the last short), and the same
  // device work staged (deviceAlgo "staged") for comparison.
  const std::vector<int> direct_sizes = quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  const size_t steps_count = quick ? 1031 : 2 * (size_t{4} << 20) / sizeof(float) + 4099;
  for (bool processes : {true, false}) {  // processes first: see the header
    for (int size : direct_sizes) {
      for (const char* algo : {"direct", "staged"}) {
        const size_t n = std::string(algo) == "direct" ? steps_count : count;
        const std::string job = std::to_string(size) + " ranks as " + (processes ? "processes" : "threads") +
                                ", deviceAlgo " + algo + ", count " + std::to_string(n);
        const std::string failures = braid::testing::Failures(
            RunJob(size, processes, n, BRAID_CONFIG_UNDEF_INT, nullptr, algo));
        checks.Expect(failures.empty(), job + ": " + failures);
        std::printf("%s: %s: %s\n", kName, job.c_str(), failures.empty() ? "ok" : "FAILED");
        std::fflush(stdout);
      }
    }
    for (int size : sizes) {
      for (bool pipelined : {false, true}) {
        if (pipelined && std::find(pipelined_sizes.begin(), pipelined_sizes.end(), size) == pipelined_sizes.end()) {
          continue;
        }
        const std::string job = std::to_string(size) + " ranks as " + (processes ? "processes" : "threads") +
                                (pipelined ? ", pipelined in " + std::to_string(pipelined_chunk) + "-byte steps over shm"
                                           : ", direct (from 2 ranks) and cuda_ipc");
        const std::string failures = braid::testing::Failures(
            pipelined ? RunJob(size, processes, pipelined_count, pipelined_chunk, "^cuda_ipc")
                      : RunJob(size, processes, count, BRAID_CONFIG_UNDEF_INT, nullptr));
        checks.Expect(failures.empty(), job + ": " + failures);
        std::printf("%s: %s: %s\n", kName, job.c_str(), failures.empty() ? "ok" : "FAILED");
        std::fflush(stdout);
      }
    }
  }
  return checks.Finish();
}
