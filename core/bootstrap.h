// Bootstrap: how a communicator comes to be, once for every binding.
//
// The C API (bindings/c), and later the NCCL-compatible library, are thin shims over these calls:
// they convert their arguments and errors, and the policy lives here: which store a rank joins,
// the key prefix its communicator works under, how the communicator id is derived, who hosts the
// env:// store, and how the hang-diagnosis thread reopens the store.
//
//   unique id   braidGetUniqueId hosts a store server in this process (rendezvous/bootstrap.h);
//               its ranks join it and work under prefix "comm"; the id is derived from the
//               token, which is also the secret.
//   env://      rank 0 hosts the store on MASTER_PORT unless the launcher does; the k-th env://
//               communicator of a process works under "env/<k>" (every rank makes them in the
//               same order); the id is derived from secret, address, port and prefix.
#pragma once

#include <cstddef>
#include <memory>

#include "core/base/config.h"
#include "core/base/status.h"
#include "core/communicator.h"

namespace braid {

// Bytes of a unique id (braidUniqueId's size; the layout is rendezvous/unique_id.h's).
constexpr size_t kUniqueIdBytes = 128;

// NCCL's GetUniqueId: starts a store server in this process (it lives until the process exits)
// and writes the id that names it into `out`. `config` chooses the address (socket_ifname,
// socket_family).
Status NewUniqueId(const Config& config, char out[kUniqueIdBytes]);

// InvalidArgument unless 1 <= nranks and 0 <= rank < nranks.
Status CheckMembership(int nranks, int rank);

// Every rank calls it once with the same id and nranks and its own rank: joins the id's store,
// then Communicator::Create (blocks until every rank arrived or config.timeout_ms).
Result<std::unique_ptr<Communicator>> CreateFromUniqueId(const char id[kUniqueIdBytes], int nranks,
                                                         int rank, Config config);

// env:// (rendezvous/launch_env.h says which variables): as CreateFromUniqueId, with the rank,
// size and store read from the launcher's environment.
Result<std::unique_ptr<Communicator>> CreateFromEnvironment(Config config);

}  // namespace braid
