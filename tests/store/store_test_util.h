// Helpers shared by the store tests: a server on loopback, raw sockets that speak (or break) the
// wire protocol, and polling for a condition with a bound.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/base/deadline.h"
#include "core/base/hmac_sha256.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"

namespace braid::rendezvous::testing {

inline Deadline Soon(int64_t ms = 10000) { return Deadline::AfterMs(ms); }

// 512 clients and their 512 server-side sockets live in one test process.
inline void RaiseFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

inline std::unique_ptr<TcpStoreServer> StartServer(StoreServerOptions options = {},
                                                   const std::string& host = "127.0.0.1") {
  auto server = TcpStoreServer::Start(host, 0, std::move(options));
  if (!server.ok()) return nullptr;
  return std::move(server).value();
}

inline std::unique_ptr<TcpStoreClient> Client(int port, const std::string& secret = "",
                                              const std::string& host = "127.0.0.1") {
  auto client = TcpStoreClient::Connect(host, port, secret, Soon());
  if (!client.ok()) return nullptr;
  return std::move(client).value();
}

// Polls `condition` every 10 ms for up to `ms`.
inline bool Eventually(const std::function<bool()>& condition, int64_t ms = 5000) {
  Deadline deadline = Deadline::AfterMs(ms);
  while (!deadline.Expired()) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// A blocking IPv4 loopback socket for sending hand-made frames.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawSocket() { Close(); }
  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool Send(const std::string& bytes) {
    sent_ += bytes;
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until the peer closes or `ms` pass; returns what arrived; `closed` says which.
  std::string ReadUntilClosed(int ms, bool* closed) {
    std::string out;
    *closed = false;
    Deadline deadline = Deadline::AfterMs(ms);
    char buf[65536];
    while (!deadline.Expired()) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(deadline.RemainingMs())) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        *closed = true;
        return out;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Reads exactly one frame (header + body) or returns false after `ms`.
  bool ReadFrame(int ms, protocol::FrameHeader* header, std::string* body) {
    std::string bytes;
    Deadline deadline = Deadline::AfterMs(ms);
    char buf[65536];
    size_t need = protocol::kHeaderBytes;
    while (bytes.size() < need) {
      if (deadline.Expired()) return false;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(deadline.RemainingMs())) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, std::min(sizeof(buf), need - bytes.size()), 0);
      if (n <= 0) return false;
      bytes.append(buf, static_cast<size_t>(n));
      if (bytes.size() == protocol::kHeaderBytes && need == protocol::kHeaderBytes) {
        auto check = protocol::ParseHeader(reinterpret_cast<const uint8_t*>(bytes.data()),
                                           bytes.size(), protocol::kMaxResponseBodyBytes, true);
        if (check.error != protocol::HeaderError::kNone) return false;
        *header = check.header;
        need += check.header.body_bytes;
      }
    }
    *body = bytes.substr(protocol::kHeaderBytes);
    return true;
  }
  // Sends `request` and reads its reply; false if none came or it did not decode.
  bool Exchange(const protocol::Request& request, protocol::Response* reply) {
    if (!Send(protocol::EncodeRequest(request))) return false;
    protocol::FrameHeader header;
    std::string body;
    if (!ReadFrame(5000, &header, &body)) return false;
    auto decoded = protocol::DecodeResponse(
        request.op, reinterpret_cast<const uint8_t*>(body.data()), body.size());
    if (!decoded.ok()) return false;
    *reply = std::move(decoded).value();
    return true;
  }
  // HELLO: sends a fresh client nonce; returns the server's nonce (empty on failure).
  std::string SendHello() {
    protocol::Request hello;
    hello.op = protocol::Op::kHello;
    hello.request_id = 1;
    hello.nonce = crypto::NewNonce().value();
    client_nonce_ = hello.nonce;
    protocol::Response reply;
    if (!Exchange(hello, &reply) || reply.code != Code::kOk) return "";
    return reply.values.at(0);
  }
  // The whole handshake with `secret`, as TcpStoreClient does it; true if the server admitted us.
  bool Hello(const std::string& secret = "") {
    std::string server_nonce = SendHello();
    if (server_nonce.empty()) return false;
    protocol::Request auth;
    auth.op = protocol::Op::kAuth;
    auth.request_id = 2;
    crypto::Digest proof = crypto::ChallengeProof(secret, crypto::ProofRole::kClient,
                                                  protocol::kAuthContext, client_nonce_,
                                                  server_nonce);
    auth.proof.assign(proof.begin(), proof.end());
    protocol::Response reply;
    return Exchange(auth, &reply) && reply.code == Code::kOk;
  }
  int fd() const { return fd_; }
  // Every byte sent so far (to replay a handshake).
  const std::string& sent() const { return sent_; }

 private:
  int fd_ = -1;
  std::string sent_;
  std::string client_nonce_;
};

}  // namespace braid::rendezvous::testing
