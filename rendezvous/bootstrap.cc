#include "rendezvous/bootstrap.h"

#include <map>
#include <mutex>
#include <vector>

#include "core/base/net_interfaces.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"

namespace braid::rendezvous {
namespace {

// Servers hosted by this process. Never destroyed: ranks in this process or others may use them
// until exit, and a static destructor would race with threads still using them.
struct HostedServers {
  std::mutex mutex;  // guards both containers
  std::vector<std::unique_ptr<TcpStoreServer>> for_unique_ids;
  std::map<int, std::unique_ptr<TcpStoreServer>> by_port;
};

HostedServers& Hosted() {
  static HostedServers* servers = new HostedServers();
  return *servers;
}

}  // namespace

Result<UniqueIdFields> NewUniqueId(const Config& config) {
  UniqueIdFields fields;
  BRAID_ASSIGN_OR_RETURN(fields.token, RandomToken());
  BRAID_ASSIGN_OR_RETURN(fields.host, ChooseAddress(config.socket_ifname, config.socket_family));
  StoreServerOptions options;
  options.secret = fields.token;
  std::unique_ptr<TcpStoreServer> server;
  BRAID_ASSIGN_OR_RETURN(server, TcpStoreServer::Start("", 0, options));
  fields.port = server->port();
  HostedServers& hosted = Hosted();
  std::lock_guard<std::mutex> lock(hosted.mutex);
  hosted.for_unique_ids.push_back(std::move(server));
  return fields;
}

Status HostStoreOnce(int port, const std::string& secret) {
  HostedServers& hosted = Hosted();
  std::lock_guard<std::mutex> lock(hosted.mutex);
  if (hosted.by_port.count(port) != 0) return Status::Ok();
  StoreServerOptions options;
  options.secret = secret;
  options.rank_for_logs = 0;
  auto server = TcpStoreServer::Start("", port, options);
  if (!server.ok()) {
    return server.status().WithContext("rank 0 could not host the env:// store on MASTER_PORT=" +
                                       std::to_string(port));
  }
  hosted.by_port[port] = std::move(server).value();
  return Status::Ok();
}

Result<std::shared_ptr<Store>> ConnectStore(const std::string& host, int port,
                                            const std::string& secret, Deadline deadline) {
  auto client = TcpStoreClient::Connect(host, port, secret, deadline);
  if (!client.ok()) return client.status();
  return std::shared_ptr<Store>(std::move(client).value());
}

uint64_t CommIdFromText(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace braid::rendezvous
