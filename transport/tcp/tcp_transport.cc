#include "transport/tcp/tcp_transport.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/logging.h"
#include "core/base/net_interfaces.h"
#include "transport/handshake.h"
#include "transport/link_stash.h"
#include "transport/tcp/listener_probe.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/wire.h"

namespace braid::transport::tcp {
namespace {

// A connected socket that has not completed the handshake within this time is dropped (a
// legitimate peer does it right after connecting; this only bounds what a silent stranger holds).
constexpr int64_t kHandshakeTimeoutMs = 30 * 1000;
// Backoff between dials while the peer's listener refuses.
constexpr int kFirstRetryMs = 10;
constexpr int kMaxRetryMs = 200;
// A published address exists from the peer's transport's creation to its end, so a listener that
// keeps refusing this long means the peer is gone (exited or killed), not late: Connect fails
// naming it instead of waiting for the deadline.
constexpr int64_t kGoneAfterRefusedMs = 1000;
// Each probe of a peer's listener (listener_probe.h) waits at most this long for an answer.
constexpr int kProbeTimeoutMs = 500;
// While a send is stalled, the io thread checks this often whether anybody drives the
// connections, and pushes them itself if not (tcp_connection.h).
constexpr int kBackstopMs = 1;

using Tcp = asio::ip::tcp;

std::string EndpointText(const Tcp::endpoint& endpoint) {
  const asio::ip::address& address = endpoint.address();
  std::string host = address.to_string();
  if (address.is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(endpoint.port());
}

std::string Describe(const asio::error_code& ec) {
  if (ec == asio::error::eof) return "connection closed by the other side";
  return ec.message();
}

void TuneSocket(Tcp::socket& socket) {
  asio::error_code ignored;
  socket.set_option(Tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
}


// True for the errors a socket sees when the other side closed it or its process died.
bool HungUp(const asio::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe;
}

// Reads one handshake frame into `*frame`: the prefix every version shares, then, if the prefix
// is of this version, the rest. A prefix of another magic or version completes `done` at once so
// that the handshake names the problem instead of waiting for bytes the peer will never send.
// `done(ec, bytes)` also gets how many bytes arrived, so that a connection closed before its first
// byte (a liveness probe, listener_probe.h) can be told from a broken handshake. The caller keeps
// `socket` and `frame` alive (its shared state is captured by `done`).
template <typename Done>
void ReadFrame(Tcp::socket& socket, HandshakeFrame* frame, Done done) {
  asio::async_read(
      socket, asio::buffer(frame, handshake::kPrefixBytes),
      [&socket, frame, done](const asio::error_code& ec, size_t prefix_bytes) {
        if (ec || !handshake::SpeaksProtocol(kProtocol, *frame) ||
            frame->version != handshake::kVersion) {
          return done(ec, prefix_bytes);
        }
        asio::async_read(socket,
                         asio::buffer(reinterpret_cast<uint8_t*>(frame) + handshake::kPrefixBytes,
                                      sizeof(HandshakeFrame) - handshake::kPrefixBytes),
                         [done](const asio::error_code& rest_ec, size_t rest_bytes) {
                           done(rest_ec, handshake::kPrefixBytes + rest_bytes);
                         });
      });
}

// A socket accepted by the listener, going through the handshake. io thread only.
struct PendingHandshake {
  PendingHandshake(Tcp::socket s, handshake::Party self)
      : socket(std::move(s)), timer(socket.get_executor()), listener(std::move(self)) {}
  Tcp::socket socket;
  asio::steady_timer timer;
  std::string from;
  handshake::Listener listener;
  HandshakeFrame hello;      // read
  HandshakeFrame challenge;  // written
  HandshakeFrame proof;      // read
  HandshakeFrame answer;     // written
};

// One Connect dialing a higher rank. The io thread owns `socket` until `done` completes OK;
// then the thread in Connect takes it. Whoever completes `done` with an error makes sure the
// io thread closes the socket.
struct ConnectAttempt {
  explicit ConnectAttempt(asio::io_context& io) : socket(io), timer(io) {}
  Tcp::socket socket;
  asio::steady_timer timer;
  Tcp::endpoint endpoint;
  std::string address;
  int peer = -1;
  int retry_ms = kFirstRetryMs;
  std::optional<handshake::Dialer> dialer;  // made when the socket connects
  HandshakeFrame hello;                     // written
  HandshakeFrame challenge;                 // read
  HandshakeFrame proof;                     // written
  HandshakeFrame answer;                    // read
  // Since when every dial was refused (kGoneAfterRefusedMs); unset while dials get through.
  bool refused = false;
  std::chrono::steady_clock::time_point refused_since;
  // The listener closed the connection mid-handshake: refused it, or died. Connect probes the
  // listener to tell which (atomic: set on the io thread, read by Connect after `done`).
  std::atomic<bool> hung_up{false};
  RequestPtr done = std::make_shared<Request>();

  std::mutex mutex;  // guards last_error (written on the io thread, read by Connect)
  std::string last_error = "no attempt finished yet";
  void SetLastError(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    last_error = text;
  }
  std::string LastError() {
    std::lock_guard<std::mutex> lock(mutex);
    return last_error;
  }
};

}  // namespace

struct TcpTransport::State : std::enable_shared_from_this<TcpTransport::State> {
  explicit State(const TransportContext& ctx)
      : context(ctx),
        rank(ctx.rank),
        io(std::make_shared<asio::io_context>(1)),
        work(asio::make_work_guard(*io)),
        driver(std::make_shared<TcpDriver>(ctx.rank,
                                           WaitBudget::For(ctx.size, ctx.config.wait_policy))),
        acceptor(*io),
        accept_retry(*io),
        backstop_timer(*io) {}

  const TransportContext context;
  const int rank;

  // This rank's side of every handshake.
  handshake::Party Party() const {
    return {kProtocol, context.comm_id, rank, context.size, context.secret};
  }
  std::shared_ptr<asio::io_context> io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  // Moves the data of every connection made (tcp_connection.h); outlives the transport when
  // connections do.
  const std::shared_ptr<TcpDriver> driver;
  std::string local_address;
  std::thread thread;

  // io thread only (once the thread runs).
  Tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  std::set<std::shared_ptr<PendingHandshake>> handshakes;
  asio::steady_timer backstop_timer;  // ticks every kBackstopMs while the driver asks for it
  bool backstop_running = false;
  bool closing = false;

  // Guards the fields below. Lock order: State::mutex, then the driver's and channels' locks.
  std::mutex mutex;
  std::condition_variable stash_cv;                 // a socket was stashed, or Abort
  std::map<int, Tcp::socket> stash;                 // handshaken, unclaimed; by peer rank
  std::set<int> claimed;                            // peers whose socket Connect took
  std::set<std::shared_ptr<ConnectAttempt>> attempts;
  Status aborted;  // non-OK once aborted

  // ---- data-path backstop (io thread; see tcp_connection.h) ----

  void StartBackstop() {
    if (closing || backstop_running) return;
    backstop_running = true;
    ArmBackstop();
  }

  void ArmBackstop() {
    backstop_timer.expires_after(std::chrono::milliseconds(kBackstopMs));
    backstop_timer.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec || self->closing || !self->driver->Backstop()) {
        self->backstop_running = false;
        return;
      }
      self->ArmBackstop();
    });
  }

  // ---- listener (io thread) ----

  void StartAccept() {
    acceptor.async_accept([self = shared_from_this()](const asio::error_code& ec,
                                                      Tcp::socket socket) {
      if (!self->acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors and similar: keep listening, but do not spin.
        BRAID_LOG(kWarn, self->rank) << "tcp accept failed: " << ec.message() << "; retrying";
        self->accept_retry.expires_after(std::chrono::milliseconds(100));
        self->accept_retry.async_wait([self](const asio::error_code& timer_ec) {
          if (!timer_ec && self->acceptor.is_open()) self->StartAccept();
        });
        return;
      }
      self->OnAccepted(std::move(socket));
      self->StartAccept();
    });
  }

  void OnAccepted(Tcp::socket socket) {
    auto hs = std::make_shared<PendingHandshake>(std::move(socket), Party());
    asio::error_code ec;
    Tcp::endpoint remote = hs->socket.remote_endpoint(ec);
    hs->from = ec ? std::string("an unknown address") : EndpointText(remote);
    TuneSocket(hs->socket);
    handshakes.insert(hs);
    hs->timer.expires_after(std::chrono::milliseconds(kHandshakeTimeoutMs));
    hs->timer.async_wait([self = shared_from_this(), hs](const asio::error_code& timer_ec) {
      if (timer_ec) return;  // cancelled: the handshake finished first
      self->Refuse(hs, "did not complete the handshake within " +
                           std::to_string(kHandshakeTimeoutMs) + " ms");
    });
    ReadFrame(hs->socket, &hs->hello,
              [self = shared_from_this(), hs](const asio::error_code& read_ec, size_t bytes) {
                self->OnHello(hs, read_ec, bytes);
              });
  }

  void Refuse(const std::shared_ptr<PendingHandshake>& hs, const std::string& why) {
    if (handshakes.erase(hs) == 0) return;  // already finished
    BRAID_LOG(kWarn, rank) << "refused a tcp connection from " << hs->from << ": " << why;
    asio::error_code ignored;
    hs->timer.cancel();
    hs->socket.close(ignored);
  }

  // Refuses the sender of `frame`, telling it why (kRefuse) before the close when it speaks this
  // handshake, so that its Connect names the cause (wrong secret, another communicator, ...)
  // rather than "connection closed". A stranger just sees the close.
  void RefuseWithAnswer(const std::shared_ptr<PendingHandshake>& hs, const std::string& why,
                        const HandshakeFrame& frame) {
    if (!handshake::SpeaksProtocol(kProtocol, frame)) return Refuse(hs, why);
    if (handshakes.erase(hs) == 0) return;
    BRAID_LOG(kWarn, rank) << "refused a tcp connection from " << hs->from << ": " << why;
    hs->timer.cancel();
    hs->listener.WriteRefusal(why, frame, &hs->answer);
    asio::async_write(hs->socket, asio::buffer(&hs->answer, sizeof(hs->answer)),
                      [hs](const asio::error_code&, size_t) {
                        asio::error_code ignored;
                        hs->socket.close(ignored);
                      });
  }

  // The hello names a plausible peer: challenge it with a fresh nonce and prove our own secret.
  void OnHello(const std::shared_ptr<PendingHandshake>& hs, const asio::error_code& ec,
               size_t bytes) {
    if (handshakes.count(hs) == 0) return;
    if (ec && bytes == 0 && HungUp(ec)) {
      // Closed before its first byte: a peer's liveness probe (listener_probe.h) or a port
      // check. Nothing was attempted, so nothing is refused or worth a warning.
      handshakes.erase(hs);
      BRAID_LOG(kTrace, rank) << "a tcp connection from " << hs->from
                              << " closed before sending anything (a liveness probe?)";
      asio::error_code ignored;
      hs->timer.cancel();
      hs->socket.close(ignored);
      return;
    }
    if (ec) return Refuse(hs, "closed before completing the handshake (" + Describe(ec) + ")");
    std::string why = hs->listener.OnHello(hs->hello);
    if (why.empty()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!aborted.ok()) why = "this transport was aborted";
    }
    if (!why.empty()) return RefuseWithAnswer(hs, why, hs->hello);
    Status challenged = hs->listener.WriteChallenge(&hs->challenge);
    if (!challenged.ok()) return RefuseWithAnswer(hs, challenged.message(), hs->hello);
    asio::async_write(hs->socket, asio::buffer(&hs->challenge, sizeof(hs->challenge)),
                      [self = shared_from_this(), hs](const asio::error_code& write_ec, size_t) {
                        if (self->handshakes.count(hs) == 0) return;
                        if (write_ec) {
                          return self->Refuse(hs, "could not send the challenge (" +
                                                      Describe(write_ec) + ")");
                        }
                        ReadFrame(hs->socket, &hs->proof,
                                  [self, hs](const asio::error_code& read_ec, size_t) {
                                    self->OnProof(hs, read_ec);
                                  });
                      });
  }

  void OnProof(const std::shared_ptr<PendingHandshake>& hs, const asio::error_code& ec) {
    if (handshakes.count(hs) == 0) return;
    const int peer = hs->hello.sender_rank;
    if (ec) {
      return Refuse(hs, "the peer claiming to be rank " + std::to_string(peer) +
                            " left before proving it holds the communicator's secret (" +
                            Describe(ec) + ")");
    }
    std::string why = hs->listener.OnProof(hs->proof, nullptr);
    if (why.empty()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!aborted.ok()) why = "this transport was aborted";
      if (claimed.count(peer) != 0) why = "rank " + std::to_string(peer) + " is already connected";
    }
    if (!why.empty()) return RefuseWithAnswer(hs, why, hs->proof);
    hs->listener.WriteAccept(&hs->answer);
    asio::async_write(hs->socket, asio::buffer(&hs->answer, sizeof(hs->answer)),
                      [self = shared_from_this(), hs](const asio::error_code& write_ec, size_t) {
                        self->OnAnswered(hs, write_ec);
                      });
  }

  void OnAnswered(const std::shared_ptr<PendingHandshake>& hs, const asio::error_code& ec) {
    if (handshakes.count(hs) == 0) return;
    if (ec) return Refuse(hs, "could not answer the handshake (" + Describe(ec) + ")");
    handshakes.erase(hs);
    hs->timer.cancel();
    int peer = hs->hello.sender_rank;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = stash.find(peer);
      if (it != stash.end()) {
        // The peer dialed again (its earlier Connect gave up): the newer socket is the live one.
        BRAID_LOG(kWarn, rank) << "rank " << peer
                               << " connected again before the first connection was used; "
                                  "keeping the newer one";
        asio::error_code ignored;
        it->second.close(ignored);
        stash.erase(it);
      }
      stash.emplace(peer, std::move(hs->socket));
    }
    stash_cv.notify_all();
  }

  // ---- dialing (io thread) ----

  void CloseAttempt(const std::shared_ptr<ConnectAttempt>& a) {
    asio::error_code ignored;
    a->timer.cancel();
    a->socket.close(ignored);
  }

  void FinishAttempt(const std::shared_ptr<ConnectAttempt>& a, Status status) {
    bool success = status.ok();
    a->done->Complete(std::move(status));
    // Lost the race against a timeout or Abort, or failed: the socket stays with the io thread.
    if (!success || !a->done->status().ok()) CloseAttempt(a);
  }

  void RetryDial(const std::shared_ptr<ConnectAttempt>& a, const asio::error_code& ec) {
    const std::string error = ec.message();
    if (ec == asio::error::connection_refused) {
      const auto now = std::chrono::steady_clock::now();
      if (!a->refused) {
        a->refused = true;
        a->refused_since = now;
      } else if (now - a->refused_since >= std::chrono::milliseconds(kGoneAfterRefusedMs)) {
        return FinishAttempt(
            a, PeerGone(rank, a->peer,
                        "its listener at " + a->address + " has refused connections for " +
                            std::to_string(kGoneAfterRefusedMs) +
                            " ms (its process exited or was killed, or its communicator was aborted)"));
      }
    } else {
      a->refused = false;  // unreachable or timed out: cannot tell, keep trying
    }
    a->SetLastError(error);
    asio::error_code ignored;
    a->socket.close(ignored);
    a->timer.expires_after(std::chrono::milliseconds(a->retry_ms));
    a->retry_ms = std::min(a->retry_ms * 2, kMaxRetryMs);
    a->timer.async_wait([self = shared_from_this(), a](const asio::error_code& ec) {
      if (ec || a->done->Test()) return self->CloseAttempt(a);
      self->Dial(a);
    });
  }

  void Dial(const std::shared_ptr<ConnectAttempt>& a) {
    if (a->done->Test()) return CloseAttempt(a);
    asio::error_code ec;
    a->socket.open(a->endpoint.protocol(), ec);
    if (ec) {
      return FinishAttempt(a, Status::SystemError("rank " + std::to_string(rank) +
                                                  ": cannot open a socket to dial rank " +
                                                  std::to_string(a->peer) + ": " + ec.message()));
    }
    TuneSocket(a->socket);
    a->socket.async_connect(a->endpoint, [self = shared_from_this(), a](const asio::error_code& ec) {
      if (a->done->Test()) return self->CloseAttempt(a);
      // Refused or unreachable: the peer may not listen yet, or the network hiccups. Keep
      // trying until Connect's deadline; Connect reports the last error.
      if (ec) return self->RetryDial(a, ec);
      self->SendHello(a);
    });
  }

  void SendHello(const std::shared_ptr<ConnectAttempt>& a) {
    a->dialer.emplace(Party(), a->peer);
    Status hello = a->dialer->WriteHello(&a->hello);
    if (!hello.ok()) return FinishAttempt(a, hello);
    asio::async_write(
        a->socket, asio::buffer(&a->hello, sizeof(a->hello)),
        [self = shared_from_this(), a](const asio::error_code& ec, size_t) {
          if (a->done->Test()) return self->CloseAttempt(a);
          if (ec) return self->Broken(a, ec);
          ReadFrame(a->socket, &a->challenge, [self, a](const asio::error_code& read_ec, size_t) {
            self->OnChallenge(a, read_ec);
          });
        });
  }

  // Answers the listener's challenge with our proof. Its own proof is noted and judged only after
  // it has judged ours (handshake.h), so that with different secrets both sides log the refusal.
  void OnChallenge(const std::shared_ptr<ConnectAttempt>& a, const asio::error_code& ec) {
    if (a->done->Test()) return CloseAttempt(a);
    if (ec) return Broken(a, ec);
    const handshake::Dialer::Verdict verdict = a->dialer->OnChallenge(a->challenge, &a->proof);
    if (verdict.outcome != handshake::Dialer::Outcome::kContinue) return Judged(a, verdict);
    asio::async_write(a->socket, asio::buffer(&a->proof, sizeof(a->proof)),
                      [self = shared_from_this(), a](const asio::error_code& write_ec, size_t) {
                        if (a->done->Test()) return self->CloseAttempt(a);
                        if (write_ec) return self->Broken(a, write_ec);
                        ReadFrame(a->socket, &a->answer,
                                  [self, a](const asio::error_code& read_ec, size_t) {
                                    self->OnAnswer(a, read_ec);
                                  });
                      });
  }

  // Authentication failed on the dialing side: logged (naming the address) and final; no retry.
  void AuthFailed(const std::shared_ptr<ConnectAttempt>& a, const std::string& why) {
    BRAID_LOG(kWarn, rank) << "tcp handshake with rank " << a->peer << " at " << a->address
                           << " failed: " << why;
    FinishAttempt(a, Status::RemoteError("rank " + std::to_string(rank) +
                                         ": tcp handshake with rank " + std::to_string(a->peer) +
                                         " at " + a->address + " failed: " + why));
  }

  void Refused(const std::shared_ptr<ConnectAttempt>& a, const std::string& why) {
    FinishAttempt(a, Status::RemoteError("rank " + std::to_string(rank) + ": rank " +
                                         std::to_string(a->peer) + " at " + a->address +
                                         " refused the tcp handshake: " + why +
                                         " (wrong address, communicator or build? see its log)"));
  }

  // The socket failed mid-handshake. A listener that refuses closes it, and so does the kernel
  // when the peer dies: Connect probes the listener to tell which (a->hung_up).
  void Broken(const std::shared_ptr<ConnectAttempt>& a, const asio::error_code& ec) {
    if (HungUp(ec)) a->hung_up = true;
    Refused(a, Describe(ec));
  }

  void OnAnswer(const std::shared_ptr<ConnectAttempt>& a, const asio::error_code& ec) {
    if (a->done->Test()) return CloseAttempt(a);
    if (ec) return Broken(a, ec);
    Judged(a, a->dialer->OnAnswer(a->answer));
  }

  // Ends the attempt as the handshake judged it: up, refused, or failed authentication.
  void Judged(const std::shared_ptr<ConnectAttempt>& a, const handshake::Dialer::Verdict& verdict) {
    switch (verdict.outcome) {
      case handshake::Dialer::Outcome::kContinue:
        return FinishAttempt(a, Status::Ok());
      case handshake::Dialer::Outcome::kRefused:
        return Refused(a, verdict.why);
      case handshake::Dialer::Outcome::kAuthFailed:
        return AuthFailed(a, verdict.why);
    }
  }

  // Closes everything the io thread owns, so that run() returns once the handlers drain.
  void CloseEverythingOnIo() {
    asio::error_code ignored;
    closing = true;
    backstop_timer.cancel();
    acceptor.close(ignored);
    accept_retry.cancel();
    for (const auto& hs : handshakes) {
      hs->timer.cancel();
      hs->socket.close(ignored);
    }
    handshakes.clear();
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& entry : stash) entry.second.close(ignored);
    stash.clear();
  }

  // ---- called from Connect's thread ----

  // Whether the listener at `peer_address` is gone (refuses connections). A peer that just died
  // may still be closing its sockets, so a live answer is asked again a few times, 100 ms apart,
  // before it is believed. "" when it is there (or cannot be told), else what was seen.
  static std::string GoneListener(const std::string& peer_address, int tries) {
    Result<std::pair<std::string, uint16_t>> target = ParseHostPort(peer_address);
    if (!target.ok()) return "";
    for (int i = 0; i < tries; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ListenerProbe probe =
          ProbeListener(target.value().first, target.value().second, kProbeTimeoutMs);
      if (probe.result == ProbeResult::kRefused) {
        return "its listener at " + peer_address + " refuses connections (" + probe.detail +
               "; its process exited or was killed, or its communicator was aborted)";
      }
    }
    return "";
  }

  // The accepting side: waits for the peer's handshaken socket, probing the peer's listener every
  // kProbeEveryMs meanwhile so that a peer that died before (or while) dialing is named within a
  // second instead of at the deadline. No probes when `peer_address` is not usable.
  Result<Tcp::socket> AwaitDialer(int peer, const std::string& peer_address, Deadline deadline) {
    std::function<std::string()> probe;
    if (ParseHostPort(peer_address).ok()) probe = [&] { return GoneListener(peer_address, 1); };
    std::unique_lock<std::mutex> lock(mutex);
    return AwaitStashedLink(lock, stash_cv, stash, claimed, aborted, rank, peer, deadline,
                            "connection", "listening on " + local_address, probe);
  }

  // Hands the handshaken socket's descriptor to a new channel of the driver: from here on the
  // data path runs on the threads that post, test and wait, not on the io thread.
  Result<std::unique_ptr<Connection>> MakeConnection(int peer, Tcp::socket socket) {
    std::shared_ptr<TcpChannel> channel;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!aborted.ok()) {
        asio::error_code ignored;
        socket.close(ignored);
        return aborted;
      }
      asio::error_code ec;
      const int fd = socket.release(ec);
      if (ec) {
        socket.close(ec);
        return Status::SystemError("rank " + std::to_string(rank) +
                                   ": cannot take over the tcp socket of rank " +
                                   std::to_string(peer) + ": " + ec.message());
      }
      const int flags = ::fcntl(fd, F_GETFL, 0);
      if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        return Status::SystemError("rank " + std::to_string(rank) +
                                   ": cannot make the tcp socket of rank " +
                                   std::to_string(peer) + " non-blocking: " + why);
      }
      // Added under the mutex, so an Abort either refused this connection or fails it.
      channel = TcpChannel::Create(fd, rank, peer, driver);
      driver->Add(channel);
    }
    BRAID_LOG(kInfo, rank) << "tcp connection to rank " << peer << " is up";
    return std::unique_ptr<Connection>(new TcpConnection(std::move(channel)));
  }
};

Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& address) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("bad tcp address '" + address + "': " + why +
                                   " (expected ip:port or [ipv6]:port)");
  };
  std::string host;
  std::string port;
  if (!address.empty() && address[0] == '[') {
    size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return bad("no ']:' after the IPv6 address");
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("IPv6 addresses need brackets");
  }
  if (host.empty()) return bad("no host");
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return bad("port is not a number");
  }
  unsigned long value = std::stoul(port);
  if (value == 0 || value > 65535) return bad("port out of range");
  return std::make_pair(host, static_cast<uint16_t>(value));
}

Result<std::unique_ptr<TcpTransport>> TcpTransport::Create(const TransportContext& context) {
  const int rank = context.rank;
  if (context.size < 1 || rank < 0 || rank >= context.size) {
    return Status::InvalidArgument("tcp transport: rank " + std::to_string(rank) +
                                   " is outside a communicator of size " +
                                   std::to_string(context.size));
  }
  auto where = [rank](const std::string& what) {
    return "rank " + std::to_string(rank) + ": tcp transport: " + what;
  };
  Result<std::string> ip = ChooseAddress(context.config.socket_ifname, context.config.socket_family);
  if (!ip.ok()) return ip.status().WithContext(where("choosing the address to listen on"));
  asio::error_code ec;
  asio::ip::address address = asio::ip::make_address(ip.value(), ec);
  if (ec) return Status::Internal(where("cannot parse interface address " + ip.value()));

  auto state = std::make_shared<State>(context);
  Tcp::endpoint endpoint(address, 0);
  state->acceptor.open(endpoint.protocol(), ec);
  if (!ec) state->acceptor.bind(endpoint, ec);
  if (!ec) state->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  Tcp::endpoint local;
  if (!ec) local = state->acceptor.local_endpoint(ec);
  if (ec) {
    return Status::SystemError(where("cannot listen on " + ip.value() + ": " + ec.message()));
  }
  state->local_address = EndpointText(local);
  state->driver->SetKick([weak = std::weak_ptr<State>(state)] {
    if (auto strong = weak.lock()) {
      asio::post(*strong->io, [strong] { strong->StartBackstop(); });
    }
  });
  state->StartAccept();
  state->thread = std::thread([io = state->io, rank] {
    pthread_setname_np(pthread_self(), "braid-tcp-io");
    for (;;) {
      try {
        io->run();
        return;
      } catch (const std::exception& e) {  // handlers do not throw; this is a last resort
        BRAID_LOG(kWarn, rank) << "tcp io thread caught an exception: " << e.what();
      }
    }
  });
  BRAID_LOG(kInfo, rank) << "tcp transport listening on " << state->local_address;
  return std::unique_ptr<TcpTransport>(new TcpTransport(std::move(state)));
}

TcpTransport::TcpTransport(std::shared_ptr<State> state) : state_(std::move(state)) {}

TcpTransport::~TcpTransport() {
  Abort(Status::Aborted("rank " + std::to_string(state_->rank) + ": tcp transport destroyed"));
  // No more backstop kicks: the ones already posted run before CloseEverythingOnIo.
  state_->driver->SetKick({});
  asio::post(*state_->io, [state = state_] { state->CloseEverythingOnIo(); });
  // Every socket, timer and attempt is closed or about to be: run() returns once the
  // handlers that this queued have run.
  state_->work.reset();
  if (state_->thread.joinable()) state_->thread.join();
}

std::string TcpTransport::LocalAddress() const { return state_->local_address; }

bool TcpTransport::CanConnect(const PeerInfo& /*self*/, const PeerInfo& /*peer*/) const {
  return true;
}

Result<std::unique_ptr<Connection>> TcpTransport::Connect(int peer,
                                                          const std::string& peer_address,
                                                          Deadline deadline) {
  State& s = *state_;
  const int rank = s.rank;
  if (peer < 0 || peer >= s.context.size || peer == rank) {
    return Status::InvalidArgument("rank " + std::to_string(rank) +
                                   ": tcp transport cannot connect to rank " +
                                   std::to_string(peer) + " in a communicator of size " +
                                   std::to_string(s.context.size));
  }
  const int64_t budget_ms = deadline.RemainingMs();

  if (peer < rank) {
    // The peer dials us: wait for the acceptor to stash its handshaken socket.
    auto socket = s.AwaitDialer(peer, peer_address, deadline);
    if (!socket.ok()) return socket.status();
    return s.MakeConnection(peer, std::move(socket).value());
  }

  // We dial the peer.
  BRAID_ASSIGN_OR_RETURN(auto host_port, ParseHostPort(peer_address));
  asio::error_code ec;
  asio::ip::address address = asio::ip::make_address(host_port.first, ec);
  if (ec) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + ": address '" +
                                   peer_address + "' of rank " + std::to_string(peer) +
                                   " is not an IP address: " + ec.message());
  }
  auto attempt = std::make_shared<ConnectAttempt>(*s.io);
  attempt->endpoint = Tcp::endpoint(address, host_port.second);
  attempt->address = peer_address;
  attempt->peer = peer;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.aborted.ok()) return s.aborted;
    s.attempts.insert(attempt);
  }
  asio::post(*s.io, [state = state_, attempt] { state->Dial(attempt); });
  (void)attempt->done->Wait(deadline);
  if (!attempt->done->Test()) {
    attempt->done->Complete(Status::Timeout(
        "rank " + std::to_string(rank) + ": could not connect to rank " + std::to_string(peer) +
        " at " + peer_address + " within " + std::to_string(budget_ms) +
        " ms (last error: " + attempt->LastError() + ")"));
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.attempts.erase(attempt);
  }
  Status status = attempt->done->status();
  if (!status.ok()) {
    // The io thread may still own the socket; it closes it there.
    asio::post(*s.io, [state = state_, attempt] { state->CloseAttempt(attempt); });
    if (attempt->hung_up && status.code() == Code::kRemoteError) {
      // Closed mid-handshake: a refusal, or the peer died. A dead peer's listener is gone too.
      std::string gone = State::GoneListener(peer_address, 3);
      if (!gone.empty()) return PeerGone(rank, peer, gone);
    }
    return status;
  }
  return s.MakeConnection(peer, std::move(attempt->socket));
}

void TcpTransport::Abort(const Status& reason) {
  State& s = *state_;
  Status status = Status::Aborted(reason.message().empty() ? "tcp transport aborted"
                                                           : reason.message());
  std::vector<std::shared_ptr<ConnectAttempt>> attempts;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.aborted.ok()) return;
    s.aborted = status;
    attempts.assign(s.attempts.begin(), s.attempts.end());
  }
  s.stash_cv.notify_all();
  // Stop listening: a peer waiting for this rank to dial it (the lower rank dials) only probes
  // that this listener is there (listener_probe.h), and an aborted transport never dials; with
  // the port closed that peer reports "rank R is gone" within a second, and its communicator
  // then reads why (the root-cause record) instead of waiting for its timeout. Dialers now get
  // a refused connection instead of a refused handshake; both fail their Connect.
  asio::post(*s.io, [state = state_] {
    asio::error_code ignored;
    state->acceptor.close(ignored);
  });
  for (const auto& attempt : attempts) {
    attempt->done->Complete(status);
    if (!attempt->done->status().ok()) {
      asio::post(*s.io, [state = state_, attempt] { state->CloseAttempt(attempt); });
    }
  }
  s.driver->FailAll(status);
  BRAID_LOG(kInfo, s.rank) << "tcp transport aborted: " << status.message();
}

}  // namespace braid::transport::tcp
