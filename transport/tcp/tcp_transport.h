// TcpTransport: links the ranks of one communicator with TCP sockets (standalone Asio).
//
// One TcpTransport per communicator. It listens on the address ChooseAddress() picks
// (BRAID_SOCKET_IFNAME / BRAID_SOCKET_FAMILY), port 0, and runs one Asio io thread for the
// listener, the handshakes and dialing. Once a link is up its socket leaves Asio: the data moves
// on the threads that post, test and wait (tcp_connection.h: one TcpDriver per transport drives
// every connection it made; why: an io thread costs a cross-thread wake-up per message). The io
// thread only backstops that driver while a send is stalled and nobody drives.
//
// Who dials: of each pair, the lower rank connects to the higher rank's listener and sends a
// hello (magic, version, comm_id, sender, receiver, nonce); the higher rank's acceptor checks it,
// and the two prove to each other that they hold the communicator's secret (challenge-response,
// wire.h; the secret never travels). The acceptor then keeps the socket by sender rank until its
// own Connect(peer) claims it. A handshake that fails a check (a port scanner, another job,
// another communicator, a stale address, a wrong secret, a replayed handshake) closes only that
// socket, with a warning naming the remote address and the reason: a stranger never takes the
// rank down. A connection that closes before its first byte is a peer's liveness probe and is
// dropped quietly.
//
// Lifetime: destroying the transport fails every connection it made (kAborted locally; peers see
// the link drop), closes the listener and joins the io thread. Connections may be destroyed before
// or after the transport; used after it, they fail every request.
#pragma once

#include <memory>
#include <string>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "transport/connection.h"
#include "transport/transport.h"

namespace braid::transport::tcp {

class TcpTransport : public Transport {
 public:
  // Picks the address, starts listening and starts the io thread. Errors: no usable interface
  // (InvalidArgument naming BRAID_SOCKET_IFNAME when it matches nothing), socket errors.
  static Result<std::unique_ptr<TcpTransport>> Create(const TransportContext& context);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  const char* name() const override { return "tcp"; }
  // "ip:port", IPv6 as "[addr]:port".
  std::string LocalAddress() const override;
  // TCP reaches every peer.
  bool CanConnect(const PeerInfo& self, const PeerInfo& peer) const override;
  // Blocks until the link with `peer` is up. The lower rank dials `peer_address` (retrying while
  // the peer's listener refuses, for up to a second) and waits for the peer's answer; the higher
  // rank waits for the peer's hello, probing the peer's listener at `peer_address` every half
  // second meanwhile (listener_probe.h; none when the address is unusable). A listener that
  // refuses means the peer's process is gone. Errors: kTimeout naming the peer, kAborted after
  // Abort, kRemoteError "rank P is gone: ..." when the peer's process exited or was killed,
  // kRemoteError when the peer refuses the handshake or the two hold different secrets
  // (TransportContext::secret), kInvalidArgument for a bad address or rank. Call at most once per
  // peer.
  Result<std::unique_ptr<Connection>> Connect(int peer, const std::string& peer_address,
                                              Deadline deadline) override;
  // Fails every pending and future request and Connect with kAborted carrying `reason`'s
  // message; wakes every waiter at once. Safe from any thread; idempotent (first reason wins).
  void Abort(const Status& reason) override;

  struct State;  // the io side; defined in tcp_transport.cc

 private:
  explicit TcpTransport(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// Splits "ip:port" or "[ipv6]:port". Exposed for tests.
Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& address);

}  // namespace braid::transport::tcp
