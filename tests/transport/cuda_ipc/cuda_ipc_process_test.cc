// The cuda_ipc transport with ranks as processes, on the CPU SIMULATION of the device seam
// (core/device/simulated_device.h; not a GPU): each rank's inboxes travel to its peers as
// descriptors over SCM_RIGHTS and are mapped there, as cuMemCreate's descriptors are on a GPU.
// Checked: every pair exchanges messages of every size both ways (larger than the ring too)
// against a pattern computed independently on each side; each process maps its peers' staging
// memory (read from /proc/self/maps, independent of the transport's own account); a peer killed
// mid-job is named by the survivors within seconds.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/device/simulated_device.h"
#include "tests/core/device/shareable_mappings.h"
#include "tests/harness/multi_rank.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"

namespace braid::transport::cuda_ipc {
namespace {

using braid::testing::Failures;
using braid::testing::ShareableMappings;
using braid::testing::RunProcesses;

constexpr int64_t kTimeoutMs = 20000;

std::string ScratchDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name + "-" + std::to_string(getpid());
  std::string command = "mkdir -p '" + dir + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  return dir;
}

// Publishes this rank's address in `dir` and reads every peer's (waiting for them).
Result<std::vector<std::string>> ExchangeAddresses(const std::string& dir, int rank, int size,
                                                   const std::string& mine) {
  {
    std::ofstream out(dir + "/tmp." + std::to_string(rank));
    out << mine;
  }
  std::rename((dir + "/tmp." + std::to_string(rank)).c_str(), (dir + "/addr." + std::to_string(rank)).c_str());
  std::vector<std::string> addresses(size);
  const Deadline deadline = Deadline::AfterMs(kTimeoutMs);
  for (int p = 0; p < size; ++p) {
    while (addresses[p].empty()) {
      std::ifstream in(dir + "/addr." + std::to_string(p));
      std::getline(in, addresses[p]);
      if (addresses[p].empty()) {
        if (deadline.Expired()) return Status::Timeout("no address from rank " + std::to_string(p));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }
  return addresses;
}

struct Rank {
  std::unique_ptr<CudaIpcTransport> transport;
  std::vector<std::unique_ptr<Connection>> conns;
};

// This rank's transport on a simulated device of its own, connected to every peer.
Result<Rank> Connected(const std::string& dir, uint64_t comm_id, int rank, int size) {
  TransportContext context;
  context.rank = rank;
  context.size = size;
  context.comm_id = comm_id;
  context.secret = "cuda-ipc-process-test";
  context.device = device::NewSimulatedDevice();
  Rank r;
  BRAID_ASSIGN_OR_RETURN(r.transport, CudaIpcTransport::Create(context));
  if (r.transport == nullptr) return Status::Internal("no cuda_ipc transport with a device in the context");
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> addresses,
                         ExchangeAddresses(dir, rank, size, r.transport->LocalAddress()));
  r.conns.resize(size);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    BRAID_ASSIGN_OR_RETURN(r.conns[p], r.transport->Connect(p, addresses[p], Deadline::AfterMs(kTimeoutMs)));
  }
  return r;
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

TEST_CASE("cuda_ipc on the simulated device: processes map each other's staging memory and "
          "exchange messages of every size",
          "[cuda_ipc][simulation]") {
  const int size = GENERATE(2, 3);
  CAPTURE(size);
  const std::string dir = ScratchDir("cuda_ipc_sizes_" + std::to_string(size));
  const uint64_t comm_id = (static_cast<uint64_t>(getpid()) << 20) + size;
  // Around the ring's piece (1 MiB) and size (4 MiB): a message larger than the ring streams.
  const std::vector<size_t> sizes = {0, 1, 63, 65, 4097, (1 << 20) + 5, (9 << 20) + 3};
  auto results = RunProcesses(size, [&](int rank, int n) -> std::string {
    Result<Rank> made = Connected(dir, comm_id, rank, n);
    if (!made.ok()) return "set-up: " + made.status().ToString();
    Rank& r = made.value();
    // Own inbox per peer plus each peer's inbox mapped here from its descriptor.
    const int mappings = ShareableMappings();
    if (mappings != 2 * (n - 1)) {
      return std::to_string(mappings) + " simulated shareable mappings, expected " + std::to_string(2 * (n - 1));
    }
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<RequestPtr> sends, recvs;
    std::vector<int> from;
    out.reserve(n * sizes.size());
    in.reserve(n * sizes.size());
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      for (size_t k = 0; k < sizes.size(); ++k) {
        out.push_back(Pattern(sizes[k], rank, p));
        sends.push_back(r.conns[p]->PostSend(out.back().data(), sizes[k], 100 + k));
        in.emplace_back(sizes[k], 0xEE);
        recvs.push_back(r.conns[p]->PostRecv(in.back().data(), sizes[k], 100 + k));
        from.push_back(p);
      }
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      Status st = recvs[i]->Wait(Deadline::AfterMs(kTimeoutMs));
      if (!st.ok()) return "receive " + std::to_string(i) + ": " + st.ToString();
      if (in[i] != Pattern(in[i].size(), from[i], rank)) {
        return "message of " + std::to_string(in[i].size()) + " bytes from rank " + std::to_string(from[i]) +
               " differs";
      }
    }
    for (auto& s : sends) {
      Status st = s->Wait(Deadline::AfterMs(kTimeoutMs));
      if (!st.ok()) return "send: " + st.ToString();
    }
    return "";
  }, 60000);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("cuda_ipc on the simulated device: a peer process killed mid-job is named", "[cuda_ipc][simulation]") {
  const std::string dir = ScratchDir("cuda_ipc_killed");
  const uint64_t comm_id = (static_cast<uint64_t>(getpid()) << 20) + 77;
  auto results = RunProcesses(3, [&](int rank, int n) -> std::string {
    Result<Rank> made = Connected(dir, comm_id, rank, n);
    if (!made.ok()) return "set-up: " + made.status().ToString();
    Rank& r = made.value();
    // A first round trip between everyone, so the kill lands on a working job.
    std::vector<uint8_t> one(100, static_cast<uint8_t>(rank)), got(100);
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      RequestPtr s = r.conns[p]->PostSend(one.data(), one.size(), 1);
      Status st = r.conns[p]->PostRecv(got.data(), got.size(), 1)->Wait(Deadline::AfterMs(kTimeoutMs));
      if (!st.ok()) return "first round: " + st.ToString();
      if (got != std::vector<uint8_t>(100, static_cast<uint8_t>(p))) return "first round: wrong bytes";
      if (!s->Wait(Deadline::AfterMs(kTimeoutMs)).ok()) return "first round send failed";
    }
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::kill(::getpid(), SIGKILL);
    }
    // Survivors wait for a message rank 2 will never send.
    std::vector<uint8_t> never(1 << 20);
    const auto start = std::chrono::steady_clock::now();
    Status st = r.conns[2]->PostRecv(never.data(), never.size(), 2)->Wait(Deadline::AfterMs(kTimeoutMs));
    const auto waited = std::chrono::steady_clock::now() - start;
    if (st.code() != Code::kRemoteError) return "expected a remote error, got " + st.ToString();
    if (st.message().find("rank 2") == std::string::npos) return "the error does not name rank 2: " + st.message();
    if (waited > std::chrono::seconds(10)) return "named the killed rank only after 10 s";
    return "";
  }, 60000);
  CHECK(results[0] == "");
  CHECK(results[1] == "");
  CHECK(results[2].find("signal 9") != std::string::npos);
}

}  // namespace
}  // namespace braid::transport::cuda_ipc
