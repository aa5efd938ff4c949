#include "tests/harness/transport_mesh.h"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <utility>

#include "tests/harness/multi_rank.h"

namespace braid::testing {

void TransportMesh::AbortAll(const std::string& why) {
  for (auto& t : transports) {
    if (t != nullptr) t->Abort(Status::Aborted(why));
  }
}

std::vector<std::unique_ptr<transport::Transport>> MakeMeshTransports(
    const std::string& name, transport::TransportFactoryFn create, int size, std::string* error,
    bool* unavailable) {
  // The pid keeps meshes of concurrent test processes apart, the counter those of this one.
  static std::atomic<uint64_t> next{0};
  const uint64_t comm_id = (static_cast<uint64_t>(getpid()) << 32) + ++next;
  std::vector<std::unique_ptr<transport::Transport>> transports;
  for (int rank = 0; rank < size; ++rank) {
    transport::TransportContext context;
    context.rank = rank;
    context.size = size;
    context.comm_id = comm_id;
    context.secret = "transport-mesh-secret";
    context.config.socket_ifname = "lo";  // TCP: loopback, as every test host has it
    Result<std::unique_ptr<transport::Transport>> created = create(context);
    if (!created.ok()) {
      *error = name + " factory: " + created.status().ToString();
      return {};
    }
    if (created.value() == nullptr) {
      *unavailable = true;
      return {};
    }
    transports.push_back(std::move(created.value()));
  }
  return transports;
}

std::string ConnectEveryPair(const std::vector<transport::Transport*>& transports,
                             ConnectionTable* conns, int64_t timeout_ms) {
  const int size = static_cast<int>(transports.size());
  conns->clear();
  conns->resize(size);
  for (auto& row : *conns) row.resize(size);
  std::vector<std::string> addresses;
  for (transport::Transport* t : transports) addresses.push_back(t->LocalAddress());
  std::mutex mutex;  // guards *conns while rank threads fill it
  auto results = RunThreads(
      size,
      [&](int r, int n) -> std::string {
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          auto c = transports[r]->Connect(p, addresses[p], Deadline::AfterMs(timeout_ms));
          if (!c.ok()) {
            return "connecting to rank " + std::to_string(p) + ": " + c.status().ToString();
          }
          std::lock_guard<std::mutex> lock(mutex);
          (*conns)[r][p] = std::move(c.value());
        }
        return "";
      },
      static_cast<int>(2 * timeout_ms), [&](const std::vector<int>&) {
        for (transport::Transport* t : transports) t->Abort(Status::Aborted("mesh set-up hung"));
      });
  return Failures(results);
}

TransportMesh MakeTransportMesh(const std::string& name, transport::TransportFactoryFn create,
                                int size, int64_t timeout_ms) {
  TransportMesh mesh;
  mesh.transports = MakeMeshTransports(name, create, size, &mesh.error, &mesh.unavailable);
  if (mesh.unavailable) mesh.error = name + " is not available on this host";
  if (mesh.transports.empty()) return mesh;
  mesh.error = ConnectEveryPair(mesh.transports, &mesh.conns, timeout_ms);
  return mesh;
}

TransportMesh MakeTransportMesh(const std::string& name, int size, int64_t timeout_ms) {
  for (const transport::TransportFactory& factory : transport::TransportFactories()) {
    if (name == factory.name && factory.create != nullptr) {
      return MakeTransportMesh(name, factory.create, size, timeout_ms);
    }
  }
  TransportMesh mesh;
  mesh.error = name + " is not built";
  return mesh;
}

}  // namespace braid::testing
