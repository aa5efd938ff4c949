#include "rendezvous/tcp_store_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <charconv>
#include <chrono>
#include <deque>
#include <exception>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/base/hmac_sha256.h"
#include "core/base/logging.h"
#include "rendezvous/store_protocol.h"

namespace braid::rendezvous {

namespace p = protocol;
using asio::ip::tcp;

namespace {

std::string EndpointText(const tcp::endpoint& ep) {
  std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

// The soft limit on open descriptors, raised to the hard limit. Why: the server holds one socket
// per client connection and a job of n ranks opens about 2n (each rank's calls and its hang
// diagnosis), so a 1024-rank job needs over 2048 descriptors in the process that hosts the
// store, while the usual soft limit is 1024 (the hard limit is commonly far higher). Descriptors
// past 1024 are only opened when that many connections come, so select() users elsewhere in the
// process see no change until the job would otherwise have failed.
void RaiseDescriptorLimit(int rank_for_logs) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
    BRAID_LOG(kInfo, rank_for_logs) << "store server: open descriptor limit raised from "
                                    << limit.rlim_cur << " to " << raised.rlim_cur;
  }
}

p::Response Ok() { return p::Response{}; }
p::Response Error(Code code, std::string message) {
  p::Response r;
  r.code = code;
  r.message = std::move(message);
  return r;
}

}  // namespace

class Session;

// A parked blocking request: answered when its keys exist (GET/WAIT/MULTI_GET), when its barrier
// fills (BARRIER), when its timer fires, or dropped when its session closes.
struct Waiter {
  uint64_t id = 0;
  std::shared_ptr<Session> session;
  p::Request request;
  std::unique_ptr<asio::steady_timer> timer;
  // How many distinct keys of the request were absent when it was last looked at and have not
  // been stored since (it is in key_waiters under each). A Store of one counts it down; only at
  // zero are all its keys looked at again. Why: looking at every key of every waiter on each
  // Store cost n^3 lookups when n ranks each wait for n keys (1024 ranks: 10^9).
  size_t missing = 0;
};

struct BarrierState {
  int64_t n = 0;
  std::vector<uint64_t> arrived;  // waiter ids, in arrival order
};

// Everything the server thread owns. Only that thread touches the non-atomic members.
class ServerCore {
 public:
  explicit ServerCore(StoreServerOptions options) : options(std::move(options)) {
    limits.max_value_bytes = this->options.max_value_bytes;
  }

  void Accept(tcp::acceptor* acceptor);
  void Handle(const std::shared_ptr<Session>& session, p::Request request);
  void DropSession(const std::shared_ptr<Session>& session, uint64_t parked_waiter);
  void Shutdown();
  std::string Tag() const { return "store server :" + std::to_string(port) + ": "; }

  // Declared first so that it is destroyed last: sockets and timers below refer to it.
  asio::io_context io;
  StoreServerOptions options;
  p::Limits limits;
  int port = 0;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::unique_ptr<asio::steady_timer> accept_retry;
  std::unordered_set<std::shared_ptr<Session>> sessions;
  std::unordered_map<std::string, std::string> data;
  std::unordered_map<uint64_t, std::unique_ptr<Waiter>> waiters;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> key_waiters;
  std::unordered_map<std::string, BarrierState> barriers;
  uint64_t next_waiter_id = 1;
  bool shutting_down = false;

  std::atomic<int64_t> stat_connections{0};
  std::atomic<int64_t> stat_waiters{0};
  std::atomic<int64_t> stat_keys{0};
  std::atomic<int64_t> stat_error_closes{0};
  std::atomic<int64_t> stat_accepted{0};
  std::atomic<int64_t> stat_authenticated{0};
  std::atomic<int64_t> stat_refused{0};
  std::atomic<int64_t> stat_wrong_secrets{0};

 private:
  bool AllPresent(const std::vector<std::string>& keys) const;
  std::vector<std::string> Missing(const std::vector<std::string>& keys) const;
  // Registers `w` in key_waiters under each distinct key of its request that is absent now and
  // sets its count; returns that count (0: every key is there).
  size_t Register(Waiter* w);
  p::Response Fetch(const p::Request& request) const;  // answer of a ready GET/WAIT/MULTI_GET
  void Park(const std::shared_ptr<Session>& session, p::Request request);
  void ArmTimer(Waiter* w);
  void OnTimeout(uint64_t id);
  // Unlinks a waiter from every index; returns it (null if already gone).
  std::unique_ptr<Waiter> Unlink(uint64_t id);
  void Answer(uint64_t id, const p::Response& response);
  void Notify(const std::string& key);
  void Store(const std::string& key, std::string value);
  void Barrier(const std::shared_ptr<Session>& session, p::Request request);
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerCore* core, tcp::socket socket)
      : core_(core), socket_(std::move(socket)), handshake_timer_(core->io) {
    asio::error_code ec;
    tcp::endpoint ep = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : EndpointText(ep);
    socket_.set_option(tcp::no_delay(true), ec);
  }

  void Start() {
    const int64_t ms = core_->options.handshake_timeout_ms;
    handshake_timer_.expires_after(std::chrono::milliseconds(ms));
    auto self = shared_from_this();
    handshake_timer_.async_wait([self, ms](const asio::error_code& ec) {
      if (ec || self->closed_ || self->state_ == AuthState::kReady) return;
      self->Close("did not authenticate within " + std::to_string(ms) + " ms", true);
    });
    MaybeRead();
  }

  // Queues a reply. Safe to call after Close (it is dropped).
  void Reply(p::Op op, uint32_t request_id, const p::Response& response) {
    if (closed_) return;
    try {
      Result<std::string> frame = p::EncodeResponse(op, request_id, response);
      if (!frame.ok()) {
        frame = p::EncodeResponse(op, request_id,
                                  Error(Code::kInvalidArgument, frame.status().message()));
      }
      if (!frame.ok()) return;
      out_.push_back(std::move(frame).value());
    } catch (const std::exception& e) {  // bad_alloc building a large reply: only this client
      Close(std::string("cannot build a reply: ") + e.what(), true);
      return;
    }
    if (!writing_) DoWrite();
  }

  // Replies with `response`, then closes the connection once the reply is written.
  void ReplyAndClose(p::Op op, uint32_t request_id, const p::Response& response,
                     const std::string& reason) {
    Reply(op, request_id, response);
    CloseAfterWrite(reason);
  }

  // Closes now; `is_error` logs a warning (protocol violation) rather than an info line. A
  // connection that never authenticated is always refused with a warning.
  void Close(const std::string& reason, bool is_error) {
    if (closed_) return;
    closed_ = true;
    handshake_timer_.cancel();
    if (state_ != AuthState::kReady && !core_->shutting_down) {
      core_->stat_error_closes++;
      core_->stat_refused++;
      BRAID_LOG(kWarn, core_->options.rank_for_logs)
          << core_->Tag() << "refused connection from " << peer_
          << " before it authenticated: " << reason;
    } else if (is_error) {
      core_->stat_error_closes++;
      BRAID_LOG(kWarn, core_->options.rank_for_logs)
          << core_->Tag() << "closing connection from " << peer_ << ": " << reason;
    } else {
      BRAID_LOG(kInfo, core_->options.rank_for_logs)
          << core_->Tag() << "connection from " << peer_ << " closed: " << reason;
    }
    asio::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    uint64_t parked = parked_waiter_;
    parked_waiter_ = 0;
    core_->DropSession(shared_from_this(), parked);
  }

  void SetParked(uint64_t waiter_id) { parked_waiter_ = waiter_id; }
  // The parked request was answered: the next request may come.
  void ClearParked() { parked_waiter_ = 0; }
  const std::string& peer() const { return peer_; }

 private:
  void CloseAfterWrite(const std::string& reason) {
    if (closed_) return;
    close_after_write_ = true;
    close_reason_ = reason;
    if (!writing_) Close(reason, true);
  }

  // One read at a time. While a request is parked we keep reading (only to notice the client
  // going away: a well-behaved client sends nothing until answered); otherwise the next request
  // is read only once every reply has been written, so a client that does not read its replies
  // cannot make the server queue unbounded output.
  void MaybeRead() {
    if (closed_ || reading_ || close_after_write_) return;
    if (!out_.empty() && parked_waiter_ == 0) return;
    reading_ = true;
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_, sizeof(header_)),
                     [self](const asio::error_code& ec, size_t n) { self->OnHeader(ec, n); });
  }

  void OnHeader(const asio::error_code& ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      if (n == 0 && ec == asio::error::eof) {
        Close(parked_waiter_ ? "client left while its request was parked" : "end of stream", false);
      } else {
        Close("connection lost " + std::string(n ? "mid-frame" : "between frames") + " (" +
                  ec.message() + ")",
              false);
      }
      return;
    }
    // Until the peer has authenticated, only the handshake's small frames are accepted.
    const size_t max_body = state_ == AuthState::kReady ? core_->limits.max_request_body_bytes()
                                                        : p::kMaxHandshakeBodyBytes;
    p::HeaderCheck check = p::ParseHeader(header_, sizeof(header_), max_body, false);
    header_info_ = check.header;
    switch (check.error) {
      case p::HeaderError::kNone:
        break;
      case p::HeaderError::kBadMagic:
        Close(check.message, true);  // not our protocol: nothing it could parse in reply
        return;
      case p::HeaderError::kBadVersion:
      case p::HeaderError::kBadKind:
      case p::HeaderError::kTooLong: {
        // Reply in this build's format so the peer can print why, then close.
        uint16_t kind = check.header.kind & static_cast<uint16_t>(~p::kResponseFlag);
        p::Op op = p::IsKnownOp(kind) ? static_cast<p::Op>(kind) : p::Op::kHello;
        Code code =
            check.error == p::HeaderError::kTooLong ? Code::kInvalidArgument : Code::kInvalidUsage;
        ReplyAndClose(op, check.header.request_id, Error(code, check.message), check.message);
        return;
      }
    }
    if (parked_waiter_ != 0) {
      Close("sent a request while its previous request is still parked", true);
      return;
    }
    body_.clear();
    body_received_ = 0;
    ReadBody();
  }

  // Grows the body buffer as bytes arrive (doubling from 64 KiB), so a peer that announces a
  // large frame and stalls holds little memory.
  void ReadBody() {
    size_t want = header_info_.body_bytes;
    if (body_received_ == want) {
      OnBody();
      return;
    }
    size_t next = std::min(want, std::max<size_t>(body_received_ * 2, 64 * 1024));
    try {
      body_.resize(next);
    } catch (const std::bad_alloc&) {
      Close("out of memory buffering a " + std::to_string(want) + "-byte frame", true);
      return;
    }
    reading_ = true;
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(&body_[body_received_], next - body_received_),
                     [self, next](const asio::error_code& ec, size_t) {
                       self->reading_ = false;
                       if (self->closed_) return;
                       if (ec) {
                         self->Close("connection lost mid-frame (" + ec.message() + ")", false);
                         return;
                       }
                       self->body_received_ = next;
                       self->ReadBody();
                     });
  }

  void OnBody() {
    Result<p::Request> decoded = p::DecodeRequest(
        header_info_, reinterpret_cast<const uint8_t*>(body_.data()), body_.size(), core_->limits);
    std::string().swap(body_);
    p::Op op = static_cast<p::Op>(header_info_.kind);
    if (!decoded.ok()) {
      ReplyAndClose(op, header_info_.request_id,
                    Error(Code::kInvalidArgument, decoded.status().message()),
                    decoded.status().message());
      return;
    }
    p::Request request = std::move(decoded).value();
    if (state_ != AuthState::kReady) {
      OnHandshake(std::move(request));
      return;
    }
    if (request.op == p::Op::kHello || request.op == p::Op::kAuth) {
      std::string why = std::string("sent ") + p::OpName(request.op) + " after the handshake";
      ReplyAndClose(request.op, request.request_id, Error(Code::kInvalidUsage, why), why);
      return;
    }
    auto self = shared_from_this();
    try {
      core_->Handle(self, std::move(request));
    } catch (const std::exception& e) {
      std::string why = std::string("internal error serving ") + p::OpName(op) + ": " + e.what();
      ReplyAndClose(op, header_info_.request_id, Error(Code::kInternalError, why), why);
      return;
    }
    MaybeRead();
  }

  // HELLO (the client's nonce) is answered with this connection's nonce and the server's proof;
  // AUTH (the client's proof over both nonces) admits the connection or closes it. A fresh nonce
  // per connection makes captured handshake bytes worthless on any other connection.
  void OnHandshake(p::Request request) {
    const p::Op op = request.op;
    const uint32_t id = request.request_id;
    if (state_ == AuthState::kAwaitHello) {
      if (op != p::Op::kHello) {
        std::string why = std::string("sent ") + p::OpName(op) + " before HELLO";
        ReplyAndClose(op, id, Error(Code::kInvalidUsage, why), why);
        return;
      }
      Result<std::string> nonce = crypto::NewNonce();
      if (!nonce.ok()) {
        ReplyAndClose(op, id, Error(Code::kSystemError, nonce.status().message()),
                      nonce.status().message());
        return;
      }
      client_nonce_ = std::move(request.nonce);
      server_nonce_ = std::move(nonce).value();
      crypto::Digest proof =
          crypto::ChallengeProof(core_->options.secret, crypto::ProofRole::kServer,
                                 p::kAuthContext, client_nonce_, server_nonce_);
      p::Response challenge;
      challenge.values = {server_nonce_, std::string(proof.begin(), proof.end())};
      state_ = AuthState::kAwaitAuth;
      Reply(op, id, challenge);
      MaybeRead();
      return;
    }
    if (op != p::Op::kAuth) {
      std::string why = std::string("sent ") + p::OpName(op) + " where AUTH was expected";
      ReplyAndClose(op, id, Error(Code::kInvalidUsage, why), why);
      return;
    }
    crypto::Digest expected =
        crypto::ChallengeProof(core_->options.secret, crypto::ProofRole::kClient, p::kAuthContext,
                               client_nonce_, server_nonce_);
    if (request.proof.size() != expected.size() ||
        !crypto::ConstantTimeEqual(expected.data(), request.proof.data(), expected.size())) {
      core_->stat_wrong_secrets++;
      std::string why =
          "wrong secret: its AUTH proof does not match this store's secret (a rank of another "
          "job, a replayed handshake, or BRAID_SECRET / the unique id differs between ranks)";
      ReplyAndClose(op, id, Error(Code::kInvalidUsage, why), why);
      return;
    }
    state_ = AuthState::kReady;
    handshake_timer_.cancel();
    core_->stat_authenticated++;
    p::Response welcome;
    welcome.number = static_cast<int64_t>(core_->options.max_value_bytes);
    Reply(op, id, welcome);
    MaybeRead();
  }

  void DoWrite() {
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self](const asio::error_code& ec, size_t) {
                        self->writing_ = false;
                        if (self->closed_) return;
                        self->out_.pop_front();
                        if (ec) {
                          self->Close("write failed (" + ec.message() + ")", false);
                          return;
                        }
                        if (!self->out_.empty()) {
                          self->DoWrite();
                        } else if (self->close_after_write_) {
                          self->Close(self->close_reason_, true);
                        } else {
                          self->MaybeRead();
                        }
                      });
  }

  enum class AuthState { kAwaitHello, kAwaitAuth, kReady };

  ServerCore* core_;
  tcp::socket socket_;
  asio::steady_timer handshake_timer_;  // closes a connection that does not authenticate in time
  AuthState state_ = AuthState::kAwaitHello;
  std::string client_nonce_;
  std::string server_nonce_;
  std::string peer_;
  uint8_t header_[p::kHeaderBytes];
  p::FrameHeader header_info_;
  std::string body_;
  size_t body_received_ = 0;
  std::deque<std::string> out_;
  bool reading_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  std::string close_reason_;
  uint64_t parked_waiter_ = 0;
};

// ---------------------------------------------------------------------------------------------
// ServerCore

void ServerCore::Accept(tcp::acceptor* acceptor) {
  acceptor->async_accept([this, acceptor](const asio::error_code& ec, tcp::socket socket) {
    if (shutting_down) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors (EMFILE) and the like: back off instead of spinning.
      std::string hint;
      if (ec == asio::error::no_descriptors) {
        rlimit limit{};
        if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
          hint = " (this process may open " + std::to_string(limit.rlim_cur) +
                 " descriptors and has " + std::to_string(sessions.size()) +
                 " store connections; raise the hard limit, ulimit -Hn, to serve more ranks)";
        }
      }
      BRAID_LOG(kWarn, options.rank_for_logs) << Tag() << "accept failed: " << ec.message() << hint;
      accept_retry = std::make_unique<asio::steady_timer>(io, std::chrono::milliseconds(100));
      accept_retry->async_wait([this, acceptor](const asio::error_code& wait_ec) {
        if (!wait_ec && !shutting_down) Accept(acceptor);
      });
      return;
    }
    auto session = std::make_shared<Session>(this, std::move(socket));
    stat_accepted++;
    sessions.insert(session);
    stat_connections = static_cast<int64_t>(sessions.size());
    session->Start();
    Accept(acceptor);
  });
}

void ServerCore::DropSession(const std::shared_ptr<Session>& session, uint64_t parked_waiter) {
  if (parked_waiter != 0) Unlink(parked_waiter);  // its reply has nowhere to go
  sessions.erase(session);
  stat_connections = static_cast<int64_t>(sessions.size());
}

void ServerCore::Shutdown() {
  shutting_down = true;
  asio::error_code ec;
  for (auto& acceptor : acceptors) acceptor->close(ec);
  if (accept_retry) accept_retry->cancel();
  std::vector<std::shared_ptr<Session>> all(sessions.begin(), sessions.end());
  for (auto& session : all) session->Close("server stopping", false);
  waiters.clear();
  key_waiters.clear();
  barriers.clear();
  stat_waiters = 0;
  io.stop();
}

bool ServerCore::AllPresent(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (data.find(key) == data.end()) return false;
  }
  return true;
}

std::vector<std::string> ServerCore::Missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (data.find(key) == data.end()) missing.push_back(key);
  }
  return missing;
}

p::Response ServerCore::Fetch(const p::Request& request) const {
  p::Response r;
  if (request.op == p::Op::kGet) {
    r.values.push_back(data.at(request.keys[0]));
  } else if (request.op == p::Op::kMultiGet) {
    r.values.reserve(request.keys.size());
    for (const std::string& key : request.keys) r.values.push_back(data.at(key));
  }
  return r;
}

void ServerCore::Store(const std::string& key, std::string value) {
  data[key] = std::move(value);
  stat_keys = static_cast<int64_t>(data.size());
  Notify(key);
}

size_t ServerCore::Register(Waiter* w) {
  w->missing = 0;
  const std::vector<std::string>& keys = w->request.keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (data.find(keys[i]) != data.end()) continue;
    // A key listed twice counts once: its Store notifies once.
    if (key_waiters[keys[i]].insert(w->id).second) ++w->missing;
  }
  return w->missing;
}

void ServerCore::Notify(const std::string& key) {
  auto it = key_waiters.find(key);
  if (it == key_waiters.end()) return;
  // The key exists now, so nobody waits for it any more: each of these waiters is one key closer.
  std::unordered_set<uint64_t> ids = std::move(it->second);
  key_waiters.erase(it);
  for (uint64_t id : ids) {
    auto w = waiters.find(id);
    if (w == waiters.end()) continue;
    Waiter* waiter = w->second.get();
    if (waiter->missing > 0 && --waiter->missing > 0) continue;
    // A key counted as present may have been deleted since: look again, and wait for what is
    // absent now (DELETE_KEY neither wakes nor cancels waiters).
    if (Register(waiter) > 0) continue;
    try {
      Answer(id, Fetch(w->second->request));
    } catch (const std::exception& e) {  // copying values failed: fail that waiter, not the setter
      std::unique_ptr<Waiter> failed = Unlink(id);
      if (failed) failed->session->Close(std::string("cannot answer: ") + e.what(), true);
    }
  }
}

std::unique_ptr<Waiter> ServerCore::Unlink(uint64_t id) {
  auto it = waiters.find(id);
  if (it == waiters.end()) return nullptr;
  std::unique_ptr<Waiter> w = std::move(it->second);
  waiters.erase(it);
  stat_waiters = static_cast<int64_t>(waiters.size());
  if (w->request.op == p::Op::kBarrier) {
    auto b = barriers.find(w->request.keys[0]);
    if (b != barriers.end()) {
      auto& arrived = b->second.arrived;
      arrived.erase(std::remove(arrived.begin(), arrived.end(), id), arrived.end());
      if (arrived.empty()) barriers.erase(b);
    }
  } else {
    for (const std::string& key : w->request.keys) {
      auto kw = key_waiters.find(key);
      if (kw == key_waiters.end()) continue;
      kw->second.erase(id);
      if (kw->second.empty()) key_waiters.erase(kw);
    }
  }
  if (w->timer) w->timer->cancel();
  return w;
}

void ServerCore::Answer(uint64_t id, const p::Response& response) {
  std::unique_ptr<Waiter> w = Unlink(id);
  if (!w) return;
  w->session->ClearParked();
  w->session->Reply(w->request.op, w->request.request_id, response);
}

void ServerCore::ArmTimer(Waiter* w) {
  if (w->request.timeout_ms == p::kNoTimeout) return;
  w->timer =
      std::make_unique<asio::steady_timer>(io, std::chrono::milliseconds(w->request.timeout_ms));
  uint64_t id = w->id;
  w->timer->async_wait([this, id](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted || shutting_down) return;
    OnTimeout(id);
  });
}

void ServerCore::OnTimeout(uint64_t id) {
  auto it = waiters.find(id);
  if (it == waiters.end()) return;
  const p::Request& q = it->second->request;
  std::string after = " after " + std::to_string(q.timeout_ms) + " ms";
  std::string message;
  if (q.op == p::Op::kBarrier) {
    size_t arrived = 0;
    auto b = barriers.find(q.keys[0]);
    if (b != barriers.end()) arrived = b->second.arrived.size();
    message = "barrier " + p::PrintableKey(q.keys[0]) + " timed out" + after + ": " +
              std::to_string(arrived) + " of " + std::to_string(q.number) + " arrived";
  } else if (q.op == p::Op::kGet) {
    message = "timed out" + after + " waiting for key " + p::PrintableKey(q.keys[0]);
  } else {
    message = std::string(p::OpName(q.op)) + " timed out" + after + " waiting for keys [" +
              p::PrintableKeys(q.keys) + "]; missing [" + p::PrintableKeys(Missing(q.keys)) + "]";
  }
  Answer(id, Error(Code::kTimeout, message));
}

void ServerCore::Park(const std::shared_ptr<Session>& session, p::Request request) {
  auto w = std::make_unique<Waiter>();
  w->id = next_waiter_id++;
  w->session = session;
  w->request = std::move(request);
  Register(w.get());
  session->SetParked(w->id);
  ArmTimer(w.get());
  waiters.emplace(w->id, std::move(w));
  stat_waiters = static_cast<int64_t>(waiters.size());
}

void ServerCore::Barrier(const std::shared_ptr<Session>& session, p::Request request) {
  const std::string key = request.keys[0];
  auto it = barriers.find(key);
  if (it != barriers.end() && it->second.n != request.number) {
    session->Reply(request.op, request.request_id,
                   Error(Code::kInvalidUsage,
                         "barrier " + p::PrintableKey(key) +
                             " called with n=" + std::to_string(request.number) +
                             " but earlier arrivals use n=" + std::to_string(it->second.n)));
    return;
  }
  if (request.number == 1) {
    session->Reply(request.op, request.request_id, Ok());
    return;
  }
  BarrierState& state = barriers[key];
  state.n = request.number;
  auto w = std::make_unique<Waiter>();
  w->id = next_waiter_id++;
  w->session = session;
  w->request = std::move(request);
  session->SetParked(w->id);
  ArmTimer(w.get());
  state.arrived.push_back(w->id);
  waiters.emplace(w->id, std::move(w));
  stat_waiters = static_cast<int64_t>(waiters.size());
  if (static_cast<int64_t>(state.arrived.size()) == state.n) {
    // Complete: release this generation; the key is free for the next one.
    std::vector<uint64_t> ids = state.arrived;
    barriers.erase(key);
    for (uint64_t id : ids) Answer(id, Ok());
  }
}

void ServerCore::Handle(const std::shared_ptr<Session>& session, p::Request q) {
  const uint32_t id = q.request_id;
  const p::Op op = q.op;
  auto reply = [&](const p::Response& r) { session->Reply(op, id, r); };
  switch (op) {
    case p::Op::kSet:
      Store(q.keys[0], std::move(q.values[0]));
      reply(Ok());
      return;
    case p::Op::kGet:
    case p::Op::kWait:
    case p::Op::kMultiGet:
      if (AllPresent(q.keys)) {
        reply(Fetch(q));
      } else {
        Park(session, std::move(q));  // a timeout of 0 fires at once, with the usual message
      }
      return;
    case p::Op::kAdd: {
      int64_t current = 0;
      auto it = data.find(q.keys[0]);
      if (it != data.end()) {
        const std::string& text = it->second;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
          reply(Error(Code::kInvalidUsage, "ADD on key " + p::PrintableKey(q.keys[0]) +
                                               " whose value is not a decimal int64"));
          return;
        }
      }
      int64_t sum = 0;
      if (__builtin_add_overflow(current, q.number, &sum)) {
        reply(Error(Code::kInvalidArgument,
                    "ADD on key " + p::PrintableKey(q.keys[0]) + " overflows"));
        return;
      }
      Store(q.keys[0], std::to_string(sum));
      p::Response r;
      r.number = sum;
      reply(r);
      return;
    }
    case p::Op::kCompareSet: {
      // c10d semantics, including its answer for an absent key with a non-empty expectation.
      p::Response r;
      auto it = data.find(q.keys[0]);
      if (it == data.end()) {
        if (q.values[0].empty()) {
          r.values.push_back(q.values[1]);
          Store(q.keys[0], std::move(q.values[1]));
        } else {
          r.values.push_back(q.values[0]);
        }
      } else if (it->second == q.values[0]) {
        r.values.push_back(q.values[1]);
        Store(q.keys[0], std::move(q.values[1]));
      } else {
        r.values.push_back(it->second);
      }
      reply(r);
      return;
    }
    case p::Op::kCheck: {
      p::Response r;
      r.number = AllPresent(q.keys) ? 1 : 0;
      reply(r);
      return;
    }
    case p::Op::kDeleteKey: {
      p::Response r;
      r.number = data.erase(q.keys[0]) ? 1 : 0;
      stat_keys = static_cast<int64_t>(data.size());
      reply(r);
      return;
    }
    case p::Op::kNumKeys: {
      p::Response r;
      r.number = static_cast<int64_t>(data.size());
      reply(r);
      return;
    }
    case p::Op::kMultiSet:
      for (size_t i = 0; i < q.keys.size(); ++i) Store(q.keys[i], std::move(q.values[i]));
      reply(Ok());
      return;
    case p::Op::kAppend: {
      std::string& value = data[q.keys[0]];
      if (value.size() + q.values[0].size() > options.max_value_bytes) {
        if (value.empty()) data.erase(q.keys[0]);
        reply(Error(Code::kInvalidArgument,
                    "APPEND to key " + p::PrintableKey(q.keys[0]) + " would make its value " +
                        std::to_string(value.size() + q.values[0].size()) +
                        " bytes, over the limit of " + std::to_string(options.max_value_bytes)));
        return;
      }
      value += q.values[0];
      stat_keys = static_cast<int64_t>(data.size());
      Notify(q.keys[0]);
      reply(Ok());
      return;
    }
    case p::Op::kListKeys: {
      p::Response r;
      r.values.reserve(data.size());
      for (const auto& kv : data) r.values.push_back(kv.first);
      std::sort(r.values.begin(), r.values.end());
      reply(r);
      return;
    }
    case p::Op::kBarrier:
      Barrier(session, std::move(q));
      return;
    case p::Op::kHello:
    case p::Op::kAuth:
      break;  // handled by the session
  }
  reply(Error(Code::kInternalError, "unhandled op"));
}

// ---------------------------------------------------------------------------------------------
// TcpStoreServer

namespace {

Status Listen(ServerCore* core, const tcp::endpoint& endpoint, bool dual_stack,
              const std::string& what) {
  auto acceptor = std::make_unique<tcp::acceptor>(core->io);
  asio::error_code ec;
  acceptor->open(endpoint.protocol(), ec);
  if (!ec && dual_stack) acceptor->set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::SystemError("store server cannot listen on " + what + ": " + ec.message());
  core->acceptors.push_back(std::move(acceptor));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& bind_host,
                                                              int port,
                                                              StoreServerOptions options) {
  if (port < 0 || port > 65535) {
    return Status::InvalidArgument("store server port " + std::to_string(port) +
                                   " is outside [0, 65535]");
  }
  if (options.max_value_bytes == 0 ||
      options.max_value_bytes > UINT32_MAX - protocol::kFrameOverheadBytes) {
    return Status::InvalidArgument("store server max_value_bytes " +
                                   std::to_string(options.max_value_bytes) +
                                   " must be in [1, 4 GiB - 1 MiB]");
  }
  if (options.handshake_timeout_ms <= 0) {
    return Status::InvalidArgument("store server handshake_timeout_ms " +
                                   std::to_string(options.handshake_timeout_ms) +
                                   " must be positive");
  }
  RaiseDescriptorLimit(options.rank_for_logs);
  auto core = std::make_unique<ServerCore>(std::move(options));
  const uint16_t want = static_cast<uint16_t>(port);
  const std::string what =
      (bind_host.empty() ? std::string("*") : bind_host) + ":" + std::to_string(port);
  if (bind_host.empty()) {
    // One dual-stack socket serves IPv6 and IPv4 (as ::ffff:a.b.c.d); where IPv6 is absent or
    // disabled, fall back to IPv4 only.
    Status v6 = Listen(core.get(), tcp::endpoint(tcp::v6(), want), true, what);
    if (!v6.ok()) {
      core->acceptors.clear();
      BRAID_RETURN_IF_ERROR(Listen(core.get(), tcp::endpoint(tcp::v4(), want), false, what));
    }
  } else {
    asio::error_code ec;
    asio::ip::address address = asio::ip::make_address(bind_host, ec);
    if (ec) {
      tcp::resolver resolver(core->io);
      auto results = resolver.resolve(bind_host, std::to_string(port), ec);
      if (ec || results.empty()) {
        return Status::SystemError("store server cannot resolve bind address '" + bind_host +
                                   "': " + (ec ? ec.message() : "no addresses"));
      }
      address = results.begin()->endpoint().address();
    }
    BRAID_RETURN_IF_ERROR(Listen(core.get(), tcp::endpoint(address, want), false, what));
  }
  asio::error_code ec;
  core->port = core->acceptors.front()->local_endpoint(ec).port();
  if (ec) return Status::SystemError("store server: local_endpoint: " + ec.message());
  for (auto& acceptor : core->acceptors) core->Accept(acceptor.get());
  BRAID_LOG(kInfo, core->options.rank_for_logs)
      << "store server listening on " << (bind_host.empty() ? "*" : bind_host) << ":" << core->port;
  int bound = core->port;
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(core), bound));
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<ServerCore> core, int port)
    : core_(std::move(core)), port_(port) {
  ServerCore* c = core_.get();
  thread_ = std::thread([c] {
    for (;;) {
      try {
        c->io.run();
        return;
      } catch (const std::exception& e) {
        // Handlers are written not to throw; this is the last line of defence.
        BRAID_LOG(kWarn, c->options.rank_for_logs) << c->Tag() << "handler threw: " << e.what();
      } catch (...) {
        BRAID_LOG(kWarn, c->options.rank_for_logs) << c->Tag() << "handler threw";
      }
    }
  });
}

TcpStoreServer::~TcpStoreServer() { Stop(); }

void TcpStoreServer::Stop() {
  std::call_once(stop_once_, [this] {
    ServerCore* c = core_.get();
    asio::post(c->io, [c] { c->Shutdown(); });
    if (thread_.joinable()) thread_.join();
    c->sessions.clear();
    c->waiters.clear();
  });
}

StoreServerStats TcpStoreServer::Stats() const {
  StoreServerStats s;
  s.open_connections = core_->stat_connections.load();
  s.parked_waiters = core_->stat_waiters.load();
  s.keys = core_->stat_keys.load();
  s.connections_closed_for_errors = core_->stat_error_closes.load();
  s.connections_accepted = core_->stat_accepted.load();
  s.connections_authenticated = core_->stat_authenticated.load();
  s.handshakes_refused = core_->stat_refused.load();
  s.wrong_secrets = core_->stat_wrong_secrets.load();
  return s;
}

}  // namespace braid::rendezvous
