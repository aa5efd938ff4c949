// The cuda_ipc transport on the GPU (CI runs it on the simulated device only:
// tests/transport/cuda_ipc). Exit 0 passed, 1 failed, 77 no device.
// - Two ranks as threads of this process (inboxes shared by pointer) and as two processes (this
//   binary re-executed per rank, so each starts CUDA fresh: cuMemCreate rings whose descriptors
//   pass with SCM_RIGHTS and are mapped with cuMemImportFromShareableHandle / cuMemMap): messages
//   of 0 B to 9 MiB + 3 (past the 4 MiB ring) both ways between cudaMalloc buffers, checked on the
//   host against a pattern each side computes; once between pageable host buffers.
// - Device::ExportContaining on a slice of a cudaMalloc allocation: base, offset, refusals.
// --quick (compute-sanitizer's run): fewer sizes.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/device/cuda_device.h"
#include "tests/gpu/gpu_check.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"

namespace braid {
namespace {

constexpr const char* kName = "cuda_ipc_gpu_test";
constexpr int64_t kTimeoutMs = 30000;

std::vector<size_t> Sizes(bool quick) {
  if (quick) return {0, 8, (1 << 20) + 5};
  return {0, 1, 8, 4097, (1 << 20) + 5, (9 << 20) + 3};
}

std::vector<uint8_t> Pattern(size_t bytes, int src, int dst) {
  std::vector<uint8_t> data(bytes);
  uint64_t x = 0x9E3779B97F4A7C15ull * (bytes + 1) + static_cast<uint64_t>(src) * 131 + dst;
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = static_cast<uint8_t>(x >> 56);
  }
  return data;
}

// Sends every size to `peer` and receives every size from it, device buffers on both sides
// (host buffers when `host`); returns "" or the first failure.
std::string Exchange(device::Device& device, transport::Connection& conn, int rank, int peer, bool quick, bool host) {
  const std::vector<size_t> sizes = Sizes(quick);
  std::vector<std::unique_ptr<device::Memory>> out, in;
  std::vector<std::vector<uint8_t>> host_out, host_in;
  std::vector<transport::RequestPtr> sends, recvs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t bytes = sizes[k];
    host_out.push_back(Pattern(bytes, rank, peer));
    host_in.emplace_back(bytes, 0xEE);
    void* src = host_out.back().data();
    void* dst = host_in.back().data();
    if (!host && bytes > 0) {
      auto o = device.Allocate(bytes);
      auto i = device.Allocate(bytes);
      if (!o.ok() || !i.ok()) return "cudaMalloc of " + std::to_string(bytes) + " bytes failed";
      if (cudaMemcpy(o.value()->data(), src, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemset(i.value()->data(), 0xEE, bytes) != cudaSuccess) {
        return "filling device buffers failed";
      }
      src = o.value()->data();
      dst = i.value()->data();
      out.push_back(std::move(o.value()));
      in.push_back(std::move(i.value()));
    }
    sends.push_back(conn.PostSend(src, bytes, 1000 + k));
    recvs.push_back(conn.PostRecv(dst, bytes, 1000 + k));
  }
  size_t device_index = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Status st = recvs[k]->Wait(Deadline::AfterMs(kTimeoutMs));
    if (!st.ok()) return "receive of " + std::to_string(sizes[k]) + " bytes: " + st.ToString();
    if (!host && sizes[k] > 0) {
      if (cudaMemcpy(host_in[k].data(), in[device_index++]->data(), sizes[k], cudaMemcpyDeviceToHost) != cudaSuccess) {
        return "copying a received buffer back failed";
      }
    }
    if (host_in[k] != Pattern(sizes[k], peer, rank)) {
      return "message of " + std::to_string(sizes[k]) + " bytes from rank " + std::to_string(peer) + " differs";
    }
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    Status st = sends[k]->Wait(Deadline::AfterMs(kTimeoutMs));
    if (!st.ok()) return "send of " + std::to_string(sizes[k]) + " bytes: " + st.ToString();
  }
  return "";
}

transport::TransportContext Context(int rank, uint64_t comm_id, std::shared_ptr<device::Device> device) {
  transport::TransportContext context;
  context.rank = rank;
  context.size = 2;
  context.comm_id = comm_id;
  context.secret = "cuda-ipc-gpu-test";
  context.device = std::move(device);
  return context;
}

void ThreadRanks(gpu_test::Checks& checks, bool quick) {
  auto opened = device::OpenCudaDevice(0);
  if (!checks.Expect(opened.ok(), "OpenCudaDevice: " + opened.status().ToString())) return;
  std::shared_ptr<device::Device> device = std::move(opened.value());
  const uint64_t comm_id = (static_cast<uint64_t>(getpid()) << 16) + 1;
  std::unique_ptr<transport::cuda_ipc::CudaIpcTransport> t[2];
  for (int r = 0; r < 2; ++r) {
    auto made = transport::cuda_ipc::CudaIpcTransport::Create(Context(r, comm_id, device));
    if (!checks.Expect(made.ok() && made.value() != nullptr, "threads: transport " + std::to_string(r))) return;
    t[r] = std::move(made.value());
  }
  std::unique_ptr<transport::Connection> conn[2];
  std::string errors[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] {
      auto c = t[r]->Connect(1 - r, t[1 - r]->LocalAddress(), Deadline::AfterMs(kTimeoutMs));
      if (!c.ok()) {
        errors[r] = "connect: " + c.status().ToString();
        return;
      }
      conn[r] = std::move(c.value());
      errors[r] = Exchange(*device, *conn[r], r, 1 - r, quick, /*host=*/false);
      if (errors[r].empty()) errors[r] = Exchange(*device, *conn[r], r, 1 - r, /*quick=*/true, /*host=*/true);
    });
  }
  for (int r = 0; r < 2; ++r) ranks[r].join();
  for (int r = 0; r < 2; ++r) checks.Expect(errors[r].empty(), "threads, rank " + std::to_string(r) + ": " + errors[r]);
}

// A rank of the two-process job (this binary re-executed): prints its failure, exits 0 or 1.
int ProcessRank(int rank, const std::string& dir, uint64_t comm_id, bool quick) {
  auto opened = device::OpenCudaDevice(0);
  if (!opened.ok()) {
    std::printf("rank %d: OpenCudaDevice: %s\n", rank, opened.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<device::Device> device = std::move(opened.value());
  auto made = transport::cuda_ipc::CudaIpcTransport::Create(Context(rank, comm_id, device));
  if (!made.ok() || made.value() == nullptr) {
    std::printf("rank %d: no transport: %s\n", rank, made.status().ToString().c_str());
    return 1;
  }
  { std::ofstream(dir + "/addr.tmp" + std::to_string(rank)) << made.value()->LocalAddress(); }
  std::rename((dir + "/addr.tmp" + std::to_string(rank)).c_str(), (dir + "/addr." + std::to_string(rank)).c_str());
  std::string peer_address;
  const Deadline deadline = Deadline::AfterMs(kTimeoutMs);
  while (peer_address.empty() && !deadline.Expired()) {
    std::ifstream in(dir + "/addr." + std::to_string(1 - rank));
    std::getline(in, peer_address);
    if (peer_address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto conn = made.value()->Connect(1 - rank, peer_address, Deadline::AfterMs(kTimeoutMs));
  if (!conn.ok()) {
    std::printf("rank %d: connect: %s\n", rank, conn.status().ToString().c_str());
    return 1;
  }
  const std::string error = Exchange(*device, *conn.value(), rank, 1 - rank, quick, /*host=*/false);
  if (!error.empty()) std::printf("rank %d: %s\n", rank, error.c_str());
  return error.empty() ? 0 : 1;
}

void ProcessRanks(gpu_test::Checks& checks, const char* self, bool quick) {
  char dir_template[] = "/tmp/cuda_ipc_gpu_test.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!checks.Expect(dir != nullptr, "mkdtemp")) return;
  const std::string comm_id = std::to_string((static_cast<uint64_t>(getpid()) << 16) + 2);
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      const std::string rank = std::to_string(r);
      execl(self, self, "--rank", rank.c_str(), dir, comm_id.c_str(), quick ? "--quick" : "--full",
            static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  for (int r = 0; r < 2; ++r) {
    int status = 0;
    const auto start = std::chrono::steady_clock::now();
    while (waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(90)) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    checks.Expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "processes, rank " + std::to_string(r) + " exited with status " + std::to_string(status));
  }
}

void ExportContaining(gpu_test::Checks& checks) {
  auto opened = device::OpenCudaDevice(0);
  if (!checks.Expect(opened.ok(), "OpenCudaDevice")) return;
  auto memory = opened.value()->Allocate(1 << 20);
  if (!checks.Expect(memory.ok(), "cudaMalloc")) return;
  auto* base = static_cast<uint8_t*>(memory.value()->data());
  auto range = opened.value()->ExportContaining(base + 4096, 1000);
  if (checks.Expect(range.ok(), "ExportContaining: " + range.status().ToString())) {
    checks.Expect(range.value().base == base, "ExportContaining: base");
    checks.Expect(range.value().offset == 4096, "ExportContaining: offset");
    checks.Expect(range.value().handle.size >= (1u << 20), "ExportContaining: allocation size");
  }
  auto past = opened.value()->ExportContaining(base + (1 << 20) - 10, 100);
  checks.Expect(!past.ok() && past.status().code() == Code::kInvalidArgument, "ExportContaining past the end");
  std::vector<uint8_t> host(100);
  auto not_device = opened.value()->ExportContaining(host.data(), host.size());
  checks.Expect(!not_device.ok() && not_device.status().code() == Code::kInvalidArgument,
                "ExportContaining of host memory");
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  using namespace braid;
  if (argc >= 6 && std::string(argv[1]) == "--rank") {
    return ProcessRank(std::atoi(argv[2]), argv[3], std::strtoull(argv[4], nullptr, 10),
                       std::string(argv[5]) == "--quick");
  }
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (!gpu_test::HaveDevice(kName)) return gpu_test::kExitSkipped;
  gpu_test::Checks checks(kName);
  ThreadRanks(checks, quick);
  ProcessRanks(checks, "/proc/self/exe", quick);
  ExportContaining(checks);
  return checks.Finish();
}
