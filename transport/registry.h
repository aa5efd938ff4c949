// The transport registry: every transport braid knows, in priority order, and the selection that
// BRAID_TRANSPORTS (Config::transports) makes among them.
//
// Priority order is shm > cuda_ipc > ibverbs > tcp: for each pair of ranks the communicator takes
// the first transport whose CanConnect() says yes, so TCP is the fallback that reaches everyone.
// cuda_ipc exists only for communicators on device buffers (TransportContext::device), and for
// them CreateTransports puts it first, so their GPU peers on the host link over it.
// Adding a transport is one line in registry.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "transport/transport.h"

namespace braid::transport {

using TransportFactoryFn = Result<std::unique_ptr<Transport>> (*)(const TransportContext&);

struct TransportFactory {
  const char* name;  // as spelled in BRAID_TRANSPORTS
  // nullptr while the transport is not built into braid: its name is still valid in
  // BRAID_TRANSPORTS (so "^shm" works everywhere), it just never gets created. A factory may
  // return a null Transport to say "not available on this host" (no device): it is skipped.
  TransportFactoryFn create;
};

// Every known transport, highest priority first.
const std::vector<TransportFactory>& TransportFactories();

// Names selected by `spec` (NCCL's syntax, case-insensitive, blanks ignored): "" = all,
// "tcp,shm" = only these, "^shm" = all but these. Priority order is kept whatever the order in
// `spec`. Unknown name → InvalidArgument naming it. Includes transports not built (see above).
Result<std::vector<std::string>> SelectTransportNames(const std::string& spec);

// Creates the selected transports that are built and available, in priority order.
// InvalidArgument if the selection leaves none; a factory's error is returned with context.
Result<std::vector<std::unique_ptr<Transport>>> CreateTransports(const TransportContext& context);

}  // namespace braid::transport
