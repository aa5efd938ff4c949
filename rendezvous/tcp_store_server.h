// TcpStoreServer: the key-value server every rank's TcpStoreClient talks to (rank 0 or braidrun
// hosts it). Wire protocol: rendezvous/store_protocol.h, docs/STORE_PROTOCOL.md.
//
// Why one Asio thread and no locks: all store state (keys, parked waiters, barriers) is touched
// only by the server thread, so every operation is atomic for free. Blocking operations (GET,
// WAIT, MULTI_GET, BARRIER) never block that thread: they park a waiter that is answered when the
// keys appear, when the barrier fills, or when the waiter's timer fires.
//
// Authentication: every connection starts with a challenge-response handshake over the job's
// secret (HELLO with the client's nonce, answered with the server's nonce and proof; AUTH with the
// client's proof; docs/STORE_PROTOCOL.md). The secret never travels. Until a connection has
// authenticated it may send only those two small frames, within handshake_timeout_ms; anything
// else (a stranger, garbage, a rank of another job with another secret, a replayed handshake)
// closes it with a warning naming the remote address, and the server keeps serving the others.
//
// Robustness contract: a client that vanishes mid-request, sends a malformed or oversized frame,
// or never completes a frame affects only its own connection (closed with a logged reason; its
// waiters dropped). Every length is validated before anything is allocated, and a frame body is
// buffered only as fast as its bytes actually arrive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/base/status.h"

namespace braid::rendezvous {

struct StoreServerOptions {
  // The job's secret: a client must prove it holds the same one (HMAC challenge-response). Empty
  // means no authentication: any client that also uses the empty secret gets in (tests, or
  // env:// without BRAID_SECRET); a client with a non-empty secret then refuses this server.
  std::string secret;
  // A connection that has not authenticated within this time is closed.
  int64_t handshake_timeout_ms = 30 * 1000;
  // Largest value (and, with a fixed overhead, request frame) accepted.
  size_t max_value_bytes = 64u << 20;
  // Rank printed in this server's log lines (-1: none).
  int rank_for_logs = -1;
};

// Counters for tests and diagnostics; a snapshot, read without stopping the server.
struct StoreServerStats {
  int64_t open_connections = 0;
  int64_t parked_waiters = 0;
  int64_t keys = 0;
  int64_t connections_closed_for_errors = 0;
  // Totals since start.
  int64_t connections_accepted = 0;
  int64_t connections_authenticated = 0;
  // Closed before completing the handshake, for any reason (garbage, a wrong proof, silence,
  // disconnect); every one is logged with BRAID_LOG(kWarn) naming the remote address.
  int64_t handshakes_refused = 0;
  // Of those, the ones whose AUTH proof did not match the secret.
  int64_t wrong_secrets = 0;
};

class ServerCore;  // tcp_store_server.cc: io_context, acceptors, sessions, store state

class TcpStoreServer {
 public:
  // Listens on `bind_host` ("" = all interfaces, dual-stack IPv6+IPv4 where the host allows it,
  // else IPv4; otherwise a literal IPv4/IPv6 address or a resolvable name) and `port` (0 picks an
  // ephemeral port; see port()). Serves from a background thread until Stop() or destruction.
  // Fails with kSystemError naming host:port if it cannot listen, kInvalidArgument on bad input.
  static Result<std::unique_ptr<TcpStoreServer>> Start(const std::string& bind_host, int port,
                                                       StoreServerOptions options);

  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  ~TcpStoreServer();

  // The port actually bound. Thread-safe.
  int port() const { return port_; }
  // Closes every connection (parked clients see the connection drop) and joins the server
  // thread. Idempotent; thread-safe; must not be called from the server thread.
  void Stop();
  StoreServerStats Stats() const;

 private:
  TcpStoreServer(std::unique_ptr<ServerCore> core, int port);

  std::unique_ptr<ServerCore> core_;
  int port_;
  std::thread thread_;
  std::once_flag stop_once_;
};

}  // namespace braid::rendezvous
