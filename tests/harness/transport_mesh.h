// A full mesh of one transport whose ranks are threads of this process: one Transport per rank,
// made by a factory of the registry (transport/registry.h), and every pair connected. For tests
// below the communicator: the Connection conformance suite, the primitives.
//
//   TransportMesh mesh = MakeTransportMesh("tcp", 3, 20000);
//   REQUIRE(mesh.error.empty());
//   mesh(0, 1).PostSend(...);          // rank 0's connection to rank 1
//
// Catch2 v2 is not thread-safe: nothing here asserts; failures come back in `error`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/connection.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace braid::testing {

// table[r][p]: rank r's connection to rank p (null for p == r).
using ConnectionTable = std::vector<std::vector<std::unique_ptr<transport::Connection>>>;

struct TransportMesh {
  std::vector<std::unique_ptr<transport::Transport>> transports;  // transports[r]: rank r's
  ConnectionTable conns;
  bool unavailable = false;  // the factory said the transport is not on this host
  std::string error;         // the first failure, "" if every pair is connected

  transport::Connection& operator()(int rank, int peer) { return *conns[rank][peer]; }
  int size() const { return static_cast<int>(transports.size()); }
  // Aborts every rank's transport, failing whatever waits on it (a test that hangs calls it).
  void AbortAll(const std::string& why);
};

// Connects every pair of `transports` (rank r's is transports[r]), each rank in a thread of its
// own (the accepting side blocks in Connect), each Connect with a deadline of `timeout_ms`;
// (*conns)[r][p] becomes rank r's connection to rank p. Returns "" or what failed, naming the
// rank; a set-up still running at twice the deadline has every transport aborted.
std::string ConnectEveryPair(const std::vector<transport::Transport*>& transports,
                             ConnectionTable* conns, int64_t timeout_ms);
// The same over a test's own transports of a concrete type (ShmTransport, TcpTransport).
template <typename T>
std::string ConnectEveryPair(const std::vector<std::unique_ptr<T>>& transports,
                             ConnectionTable* conns, int64_t timeout_ms) {
  std::vector<transport::Transport*> ranks;
  for (const auto& t : transports) ranks.push_back(t.get());
  return ConnectEveryPair(ranks, conns, timeout_ms);
}

// `size` transports made by `create` (called `name` in messages), the ranks of one communicator
// id no other mesh of any test process uses, on loopback and sharing a secret. Empty when they
// cannot be made: then *unavailable if the factory said "not on this host" (it returned null),
// else *error says why.
std::vector<std::unique_ptr<transport::Transport>> MakeMeshTransports(
    const std::string& name, transport::TransportFactoryFn create, int size, std::string* error,
    bool* unavailable);

// Those transports with every pair connected, each rank in a thread of its own (the accepting
// side blocks in Connect), each Connect with a deadline of `timeout_ms`; a set-up still running
// at twice that is aborted and named in `error`.
TransportMesh MakeTransportMesh(const std::string& name, transport::TransportFactoryFn create,
                                int size, int64_t timeout_ms);
// The same for the registry's transport `name`; error "<name> is not built" if it has none.
TransportMesh MakeTransportMesh(const std::string& name, int size, int64_t timeout_ms);

}  // namespace braid::testing
