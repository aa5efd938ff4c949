#include "transport/registry.h"

#include <algorithm>
#include <cctype>

#include "core/base/logging.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/ibverbs/verbs_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace braid::transport {
namespace {

Result<std::unique_ptr<Transport>> CreateTcp(const TransportContext& context) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<tcp::TcpTransport> transport,
                         tcp::TcpTransport::Create(context));
  return std::unique_ptr<Transport>(std::move(transport));
}

// Null (skipped) for a single-rank communicator or where memfd_create is unavailable.
Result<std::unique_ptr<Transport>> CreateShm(const TransportContext& context) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<shm::ShmTransport> transport,
                         shm::ShmTransport::Create(context));
  return std::unique_ptr<Transport>(std::move(transport));
}

// Null (skipped) for a host-only communicator (no device in the context) or a single rank.
Result<std::unique_ptr<Transport>> CreateCudaIpc(const TransportContext& context) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<cuda_ipc::CudaIpcTransport> transport,
                         cuda_ipc::CudaIpcTransport::Create(context));
  return std::unique_ptr<Transport>(std::move(transport));
}

// Null (skipped, with an INFO line saying why) where libibverbs or an active RDMA port is absent.
Result<std::unique_ptr<Transport>> CreateIbverbs(const TransportContext& context) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ibverbs::VerbsTransport> transport,
                         ibverbs::VerbsTransport::Create(context));
  return std::unique_ptr<Transport>(std::move(transport));
}

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string Trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

std::string KnownNames() {
  std::string names;
  for (const TransportFactory& factory : TransportFactories()) {
    if (!names.empty()) names += ", ";
    names += factory.name;
  }
  return names;
}

}  // namespace

const std::vector<TransportFactory>& TransportFactories() {
  static const std::vector<TransportFactory> factories = {
      {"shm", &CreateShm},            // ranks on one host (transport/shm)
      {"cuda_ipc", &CreateCudaIpc},   // GPU ranks on one host (transport/cuda_ipc; device comms only)
      {"ibverbs", &CreateIbverbs},  // RDMA (transport/ibverbs; null without libibverbs or a port)
      {"tcp", &CreateTcp},          // reaches every peer: keep it last
  };
  return factories;
}

Result<std::vector<std::string>> SelectTransportNames(const std::string& spec) {
  std::string rest = Trim(spec);
  bool exclude = false;
  if (!rest.empty() && rest[0] == '^') {
    exclude = true;
    rest = rest.substr(1);
  }
  std::vector<std::string> listed;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    if (comma == std::string::npos) comma = rest.size();
    std::string name = Lower(Trim(rest.substr(start, comma - start)));
    start = comma + 1;
    if (name.empty()) continue;
    bool known = std::any_of(TransportFactories().begin(), TransportFactories().end(),
                             [&](const TransportFactory& f) { return name == f.name; });
    if (!known) {
      return Status::InvalidArgument("BRAID_TRANSPORTS='" + spec + "' names unknown transport '" +
                                     name + "' (known: " + KnownNames() + ")");
    }
    listed.push_back(name);
  }
  bool everything = listed.empty() && !exclude;
  std::vector<std::string> selected;
  for (const TransportFactory& factory : TransportFactories()) {
    bool in_list = std::find(listed.begin(), listed.end(), factory.name) != listed.end();
    if (everything || (exclude ? !in_list : in_list)) selected.push_back(factory.name);
  }
  if (selected.empty()) {
    return Status::InvalidArgument("BRAID_TRANSPORTS='" + spec + "' selects no transport");
  }
  return selected;
}

Result<std::vector<std::unique_ptr<Transport>>> CreateTransports(const TransportContext& context) {
  const std::string& spec = context.config.transports;
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> names, SelectTransportNames(spec));
  std::vector<std::unique_ptr<Transport>> transports;
  std::string unavailable;
  for (const TransportFactory& factory : TransportFactories()) {
    if (std::find(names.begin(), names.end(), factory.name) == names.end()) continue;
    if (factory.create == nullptr) {
      unavailable += std::string(unavailable.empty() ? "" : ", ") + factory.name + " (not built)";
      continue;
    }
    Result<std::unique_ptr<Transport>> created = factory.create(context);
    if (!created.ok()) {
      return created.status().WithContext("creating the " + std::string(factory.name) +
                                          " transport");
    }
    if (created.value() == nullptr) {
      // cuda_ipc is for device communicators only: a host-only one is told nothing about it.
      if (context.device == nullptr && std::string(factory.name) == "cuda_ipc") continue;
      BRAID_LOG(kInfo, context.rank) << "transport " << factory.name
                                     << " is not available on this host";
      unavailable += std::string(unavailable.empty() ? "" : ", ") + factory.name +
                     " (not available here)";
      continue;
    }
    transports.push_back(std::move(created.value()));
  }
  // A communicator on device buffers links the GPU peers of its host over cuda_ipc rather than
  // shm (both reach the same peers; cuda_ipc's rings are device memory). It exists only for such
  // communicators, so host-only ones keep exactly the table's order.
  auto cuda_ipc = std::find_if(transports.begin(), transports.end(),
                               [](const std::unique_ptr<Transport>& t) { return std::string(t->name()) == "cuda_ipc"; });
  if (cuda_ipc != transports.end()) std::rotate(transports.begin(), cuda_ipc, cuda_ipc + 1);
  if (transports.empty()) {
    return Status::InvalidArgument("BRAID_TRANSPORTS='" + spec +
                                   "' leaves no usable transport: " + unavailable);
  }
  return transports;
}

}  // namespace braid::transport
