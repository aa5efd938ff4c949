// Bootstrap: the store servers a process hosts and the store connections ranks make.
//
// braidGetUniqueId starts a store server (one per unique id, secret = the id's token) that lives
// until the process exits, like NCCL's bootstrap root. Under env://, rank 0 hosts the job's store
// on MASTER_PORT unless the launcher already does (BRAID_STORE_HOSTED=1, set by braidrun).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/base/config.h"
#include "core/base/deadline.h"
#include "core/base/status.h"
#include "rendezvous/store.h"
#include "rendezvous/unique_id.h"

namespace braid::rendezvous {

// Starts a store server on an ephemeral port of every interface and returns the id fields:
// the address chosen per BRAID_SOCKET_IFNAME / BRAID_SOCKET_FAMILY, the port, a fresh token.
Result<UniqueIdFields> NewUniqueId(const Config& config);

// Hosts the env:// store on `port` in this process (once per port; later calls are no-ops).
Status HostStoreOnce(int port, const std::string& secret);

// Connects to the store at host:port, retrying until `deadline` (the server may start later).
Result<std::shared_ptr<Store>> ConnectStore(const std::string& host, int port,
                                            const std::string& secret, Deadline deadline);

// A 64-bit communicator id derived from text (FNV-1a): equal texts give equal ids on every rank.
uint64_t CommIdFromText(const std::string& text);

}  // namespace braid::rendezvous
