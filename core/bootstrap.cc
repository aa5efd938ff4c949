#include "core/bootstrap.h"

#include <atomic>
#include <functional>
#include <string>
#include <utility>

#include "core/base/deadline.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/store.h"
#include "rendezvous/unique_id.h"

namespace braid {

static_assert(kUniqueIdBytes == rendezvous::kUniqueIdBytes, "one unique id size");

namespace {

std::string Who(int rank) { return "rank " + std::to_string(rank); }

// Opens further connections to the same store with the same key prefix (hang diagnosis).
std::function<Result<std::shared_ptr<rendezvous::Store>>()> StoreOpener(
    std::string host, int port, std::string secret, std::string prefix, int64_t timeout_ms) {
  return [=]() -> Result<std::shared_ptr<rendezvous::Store>> {
    auto store = rendezvous::ConnectStore(host, port, secret, Deadline::AfterMs(timeout_ms));
    if (!store.ok()) return store.status();
    return std::shared_ptr<rendezvous::Store>(
        std::make_shared<rendezvous::PrefixStore>(std::move(store).value(), prefix));
  };
}

}  // namespace

Status NewUniqueId(const Config& config, char out[kUniqueIdBytes]) {
  rendezvous::UniqueIdFields fields;
  BRAID_ASSIGN_OR_RETURN(fields, rendezvous::NewUniqueId(config));
  return rendezvous::EncodeUniqueId(fields, out);
}

Status CheckMembership(int nranks, int rank) {
  if (nranks < 1) {
    return Status::InvalidArgument("nranks " + std::to_string(nranks) + " is below 1");
  }
  if (rank < 0 || rank >= nranks) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " is outside [0, nranks=" +
                                   std::to_string(nranks) + ")");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Communicator>> CreateFromUniqueId(const char id[kUniqueIdBytes], int nranks,
                                                         int rank, Config config) {
  BRAID_RETURN_IF_ERROR(CheckMembership(nranks, rank));
  rendezvous::UniqueIdFields fields;
  BRAID_ASSIGN_OR_RETURN(fields, rendezvous::DecodeUniqueId(id));
  const Deadline deadline = Deadline::AfterMs(config.timeout_ms);
  auto connected = rendezvous::ConnectStore(fields.host, fields.port, fields.token, deadline);
  if (!connected.ok()) {
    return connected.status().WithContext(Who(rank) + ": reaching the store of the unique id");
  }
  Communicator::InitOptions options;
  options.rank = rank;
  options.size = nranks;
  options.comm_id = rendezvous::CommIdFromText(fields.token);
  options.secret = fields.token;
  options.store = std::make_shared<rendezvous::PrefixStore>(std::move(connected).value(), "comm");
  options.open_store =
      StoreOpener(fields.host, fields.port, fields.token, "comm", config.timeout_ms);
  options.store_address = fields.host + ":" + std::to_string(fields.port);
  options.config = std::move(config);
  return Communicator::Create(std::move(options));
}

Result<std::unique_ptr<Communicator>> CreateFromEnvironment(Config config) {
  // Each env:// communicator of this process gets its own key space; every rank makes them in
  // the same order, so the k-th one matches across ranks.
  static std::atomic<int> env_generation{0};
  rendezvous::LaunchEnvironment env;
  BRAID_ASSIGN_OR_RETURN(env, rendezvous::ReadLaunchEnvironment());
  if (env.rank == 0 && !env.store_hosted) {
    BRAID_RETURN_IF_ERROR(rendezvous::HostStoreOnce(env.master_port, env.secret));
  }
  const Deadline deadline = Deadline::AfterMs(config.timeout_ms);
  auto connected = rendezvous::ConnectStore(env.master_addr, env.master_port, env.secret, deadline);
  if (!connected.ok()) {
    return connected.status().WithContext(Who(env.rank) + ": reaching the env:// store at " +
                                          env.master_addr + ":" + std::to_string(env.master_port));
  }
  const std::string space = "env/" + std::to_string(env_generation.fetch_add(1));
  Communicator::InitOptions options;
  options.rank = env.rank;
  options.size = env.world_size;
  options.secret = env.secret;
  options.comm_id = rendezvous::CommIdFromText(env.secret + "@" + env.master_addr + ":" +
                                               std::to_string(env.master_port) + "/" + space);
  options.store = std::make_shared<rendezvous::PrefixStore>(std::move(connected).value(), space);
  options.open_store =
      StoreOpener(env.master_addr, env.master_port, env.secret, space, config.timeout_ms);
  options.store_address = env.master_addr + ":" + std::to_string(env.master_port);
  // Rank 0's process hosts the store unless the launcher does: if it dies, so does the store.
  options.store_host_rank = env.store_hosted ? -1 : 0;
  options.config = std::move(config);
  return Communicator::Create(std::move(options));
}

}  // namespace braid
