#include "rendezvous/tcp_store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "core/base/hmac_sha256.h"
#include "rendezvous/store_protocol.h"

namespace braid::rendezvous {

namespace p = protocol;

namespace {

// poll() takes an int of milliseconds; long waits are done in slices.
int PollMs(Deadline deadline) {
  return static_cast<int>(std::min<int64_t>(deadline.RemainingMs(), INT_MAX / 2));
}

std::string ErrnoText(int err) { return std::strerror(err); }

// Waits for `events` on `fd`; false on deadline expiry. Errors surface in the following call.
bool PollFor(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd pfd{fd, events, 0};
    int ms = PollMs(deadline);
    int rc = ::poll(&pfd, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return true;  // let the caller's send/recv report the error
    if (deadline.Expired()) return false;
  }
}

// One non-blocking connect attempt to every address of host:port, each bounded by `deadline`.
// Returns the fd, or -1 with `error` set.
int ConnectOnce(const std::string& host, int port, Deadline deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    // AI_ADDRCONFIG hides ::1 and 127.0.0.1 on hosts with only loopback; try without it.
    hints.ai_flags = 0;
    rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  }
  if (rc != 0) {
    *error = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
    int s =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) {
      *error = "socket: " + ErrnoText(errno);
      continue;
    }
    int err = 0;
    if (::connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        if (!PollFor(s, POLLOUT, deadline)) {
          err = ETIMEDOUT;
        } else {
          socklen_t len = sizeof(err);
          if (::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
    }
    if (err != 0) {
      *error = ErrnoText(err);
      ::close(s);
      continue;
    }
    int one = 1;
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fd = s;
  }
  ::freeaddrinfo(list);
  return fd;
}

// Server-side timeout for a blocking request: a little shorter than the caller's deadline, so
// that the server's reply (which names exactly what is missing) normally arrives first.
int64_t ServerTimeoutMs(Deadline deadline) {
  if (deadline.when() == Deadline::Clock::time_point::max()) return p::kNoTimeout;
  int64_t remaining = deadline.RemainingMs();
  int64_t margin = std::min<int64_t>(100, remaining / 10);
  return remaining - margin;
}

std::string StripBrackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

TcpStoreClient::TcpStoreClient(std::string host, int port, std::string secret)
    : host_(std::move(host)),
      port_(port),
      secret_(std::move(secret)),
      address_((host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" +
               std::to_string(port_)) {}

TcpStoreClient::~TcpStoreClient() {
  std::lock_guard<std::mutex> lock(mutex_);
  CloseLocked();
}

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, int port,
                                                                const std::string& secret,
                                                                Deadline deadline) {
  if (port <= 0 || port > 65535) {
    return Status::InvalidArgument("store port " + std::to_string(port) + " is outside [1, 65535]");
  }
  if (host.empty()) return Status::InvalidArgument("store host is empty");
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(StripBrackets(host), port, secret));
  {
    std::lock_guard<std::mutex> lock(client->mutex_);
    BRAID_RETURN_IF_ERROR(client->OpenLocked(deadline, true));
  }
  return client;
}

void TcpStoreClient::CloseLocked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status TcpStoreClient::OpenLocked(Deadline deadline, bool retry_until_deadline) {
  CloseLocked();
  std::string error;
  int64_t backoff_ms = 10;
  for (;;) {
    fd_ = ConnectOnce(host_, port_, deadline, &error);
    if (fd_ >= 0) break;
    if (!retry_until_deadline) {
      return Status::SystemError("cannot reach store at " + address_ + ": " + error);
    }
    if (deadline.Expired()) {
      return Status::Timeout("no store answered at " + address_ + " before the deadline (" + error +
                             ")");
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(backoff_ms, deadline.RemainingMs())));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 250);
  }
  Status s = HandshakeLocked(deadline);
  if (!s.ok()) CloseLocked();
  return s;
}

Result<p::Response> TcpStoreClient::HandshakeStepLocked(const p::Request& request,
                                                        Deadline deadline) {
  const std::string what = p::OpName(request.op);
  BRAID_RETURN_IF_ERROR(SendAllLocked(p::EncodeRequest(request), deadline, what));
  uint8_t header[p::kHeaderBytes];
  BRAID_RETURN_IF_ERROR(RecvAllLocked(header, sizeof(header), deadline, what));
  p::HeaderCheck check = p::ParseHeader(header, sizeof(header), 4096, true);
  if (check.error != p::HeaderError::kNone) {
    return Status::InvalidUsage("store at " + address_ +
                                " does not speak this store protocol: " + check.message);
  }
  if (check.header.kind != (static_cast<uint16_t>(request.op) | p::kResponseFlag) ||
      check.header.request_id != request.request_id) {
    return Status::InvalidUsage("store at " + address_ + " answered " + what +
                                " with another kind of frame");
  }
  std::string body(check.header.body_bytes, '\0');
  if (!body.empty()) {
    BRAID_RETURN_IF_ERROR(
        RecvAllLocked(reinterpret_cast<uint8_t*>(&body[0]), body.size(), deadline, what));
  }
  Result<p::Response> reply = p::DecodeResponse(
      request.op, reinterpret_cast<const uint8_t*>(body.data()), body.size());
  if (!reply.ok()) return reply.status().WithContext("store at " + address_);
  if (reply->code != Code::kOk) {
    std::string hint;
    if (request.op == p::Op::kAuth && secret_.empty()) {
      hint = " (this client has no secret: is BRAID_SECRET set on this rank?)";
    }
    return Status(reply->code,
                  "store at " + address_ + " refused " + what + ": " + reply->message + hint);
  }
  return reply;
}

Status TcpStoreClient::HandshakeLocked(Deadline deadline) {
  // HELLO carries our nonce; the reply carries the server's nonce and its proof over both.
  p::Request hello;
  hello.op = p::Op::kHello;
  hello.request_id = next_request_id_++;
  BRAID_ASSIGN_OR_RETURN(hello.nonce, crypto::NewNonce());
  BRAID_ASSIGN_OR_RETURN(p::Response challenge, HandshakeStepLocked(hello, deadline));
  const std::string& server_nonce = challenge.values.at(0);
  const std::string& server_proof = challenge.values.at(1);
  // AUTH carries our proof; the server admits us (and tells its value limit) or closes. We check
  // the server's proof only after sending ours, so that a server with another secret is the one
  // that logs "wrong secret" with our address (the proofs reveal nothing about the secret).
  p::Request auth;
  auth.op = p::Op::kAuth;
  auth.request_id = next_request_id_++;
  crypto::Digest proof = crypto::ChallengeProof(secret_, crypto::ProofRole::kClient,
                                                p::kAuthContext, hello.nonce, server_nonce);
  auth.proof.assign(proof.begin(), proof.end());
  BRAID_ASSIGN_OR_RETURN(p::Response welcome, HandshakeStepLocked(auth, deadline));
  crypto::Digest expected = crypto::ChallengeProof(secret_, crypto::ProofRole::kServer,
                                                   p::kAuthContext, hello.nonce, server_nonce);
  if (server_proof.size() != expected.size() ||
      !crypto::ConstantTimeEqual(expected.data(), server_proof.data(), expected.size())) {
    return Status::InvalidUsage(
        "store at " + address_ +
        " could not prove that it holds this job's secret: it is not this job's store (another "
        "job's store on that address, or a server started with another secret)");
  }
  server_max_value_bytes_ = static_cast<size_t>(std::max<int64_t>(welcome.number, 0));
  return Status::Ok();
}

Status TcpStoreClient::SendAllLocked(const std::string& bytes, Deadline deadline,
                                     const std::string& what) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!PollFor(fd_, POLLOUT, deadline)) {
        return Status::Timeout("store at " + address_ + " did not accept " + what +
                               " before the deadline");
      }
      continue;
    }
    return Status::SystemError("lost connection to store at " + address_ + " while sending " +
                               what + ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

Status TcpStoreClient::RecvAllLocked(uint8_t* data, size_t size, Deadline deadline,
                                     const std::string& what) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd_, data + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return Status::SystemError("store at " + address_ + " closed the connection during " + what);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!PollFor(fd_, POLLIN, deadline)) {
        return Status::Timeout("store at " + address_ + " did not answer " + what +
                               " before the deadline");
      }
      continue;
    }
    return Status::SystemError("lost connection to store at " + address_ + " during " + what +
                               ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

std::string TcpStoreClient::Describe(const p::Request& q) {
  std::string text = p::OpName(q.op);
  switch (q.op) {
    case p::Op::kWait:
    case p::Op::kCheck:
    case p::Op::kMultiGet:
    case p::Op::kMultiSet:
      return text + " of keys [" + p::PrintableKeys(q.keys) + "]";
    case p::Op::kBarrier:
      return text + " " + p::PrintableKey(q.keys[0]) + " (n=" + std::to_string(q.number) + ")";
    case p::Op::kNumKeys:
    case p::Op::kListKeys:
    case p::Op::kHello:
    case p::Op::kAuth:
      return text;
    default:
      return text + " of key " + p::PrintableKey(q.keys[0]);
  }
}

Result<p::Response> TcpStoreClient::Call(p::Request request, Deadline deadline) {
  const std::string what = Describe(request);
  // Checked here so that an oversized request fails cleanly instead of costing the connection.
  p::Limits limits;
  for (const std::string& key : request.keys) {
    if (key.size() > limits.max_key_bytes) {
      return Status::InvalidArgument(what + ": a key of " + std::to_string(key.size()) +
                                     " bytes exceeds the limit of " +
                                     std::to_string(limits.max_key_bytes));
    }
  }
  if (request.keys.size() > limits.max_keys) {
    return Status::InvalidArgument(what + ": " + std::to_string(request.keys.size()) +
                                   " keys exceed the limit of " + std::to_string(limits.max_keys));
  }

  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) BRAID_RETURN_IF_ERROR(OpenLocked(deadline, false).WithContext(what));
  limits.max_value_bytes = server_max_value_bytes_;
  for (const std::string& value : request.values) {
    if (value.size() > limits.max_value_bytes) {
      return Status::InvalidArgument(what + ": a value of " + std::to_string(value.size()) +
                                     " bytes exceeds the store's limit of " +
                                     std::to_string(limits.max_value_bytes));
    }
  }
  if (p::EncodedRequestBytes(request) - p::kHeaderBytes > limits.max_request_body_bytes()) {
    return Status::InvalidArgument(what + ": request exceeds the store's frame limit of " +
                                   std::to_string(limits.max_request_body_bytes()) + " bytes");
  }
  request.request_id = next_request_id_++;
  if (p::IsBlockingOp(request.op)) request.timeout_ms = ServerTimeoutMs(deadline);

  Status s = SendAllLocked(p::EncodeRequest(request), deadline, what);
  uint8_t header[p::kHeaderBytes];
  if (s.ok()) s = RecvAllLocked(header, sizeof(header), deadline, what);
  if (!s.ok()) {
    // Whatever state the connection is in, a late reply must not answer the next call.
    CloseLocked();
    return s;
  }
  p::HeaderCheck check = p::ParseHeader(header, sizeof(header), p::kMaxResponseBodyBytes, true);
  const uint16_t expected_kind = static_cast<uint16_t>(request.op) | p::kResponseFlag;
  if (check.error == p::HeaderError::kNone &&
      (check.header.kind != expected_kind || check.header.request_id != request.request_id)) {
    check.error = p::HeaderError::kBadKind;
    check.message = "reply does not match the request (kind " + std::to_string(check.header.kind) +
                    ", id " + std::to_string(check.header.request_id) + ")";
  }
  if (check.error != p::HeaderError::kNone) {
    CloseLocked();
    return Status::Internal("store at " + address_ + " sent a bad reply to " + what + ": " +
                            check.message);
  }
  std::string body;
  try {
    body.resize(check.header.body_bytes);
  } catch (const std::bad_alloc&) {
    CloseLocked();
    return Status::SystemError("out of memory receiving a " +
                               std::to_string(check.header.body_bytes) + "-byte reply to " + what);
  }
  s = RecvAllLocked(reinterpret_cast<uint8_t*>(&body[0]), body.size(), deadline, what);
  if (!s.ok()) {
    CloseLocked();
    return s;
  }
  Result<p::Response> reply =
      p::DecodeResponse(request.op, reinterpret_cast<const uint8_t*>(body.data()), body.size());
  if (!reply.ok()) {
    CloseLocked();
    return Status::Internal("store at " + address_ + ": " + reply.status().message());
  }
  if (reply->code != Code::kOk) {
    // The server keeps the connection after a timeout; after other errors it may close it, so
    // start afresh on the next call.
    if (reply->code != Code::kTimeout) CloseLocked();
    return Status(reply->code, "store at " + address_ + ": " + reply->message);
  }
  return reply;
}

Status TcpStoreClient::Set(const std::string& key, const std::string& value, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kSet;
  q.keys = {key};
  q.values = {value};
  return Call(std::move(q), deadline).status();
}

Result<std::string> TcpStoreClient::Get(const std::string& key, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kGet;
  q.keys = {key};
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  return std::move(r.values.at(0));
}

Result<int64_t> TcpStoreClient::Add(const std::string& key, int64_t delta, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kAdd;
  q.keys = {key};
  q.number = delta;
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  return r.number;
}

Result<std::string> TcpStoreClient::CompareSet(const std::string& key, const std::string& expected,
                                               const std::string& desired, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kCompareSet;
  q.keys = {key};
  q.values = {expected, desired};
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  return std::move(r.values.at(0));
}

Status TcpStoreClient::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kWait;
  q.keys = keys;
  return Call(std::move(q), deadline).status();
}

Result<bool> TcpStoreClient::Check(const std::vector<std::string>& keys, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kCheck;
  q.keys = keys;
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  return r.number != 0;
}

Result<bool> TcpStoreClient::DeleteKey(const std::string& key, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kDeleteKey;
  q.keys = {key};
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  return r.number != 0;
}

Result<int64_t> TcpStoreClient::NumKeys(Deadline deadline) {
  p::Request q;
  q.op = p::Op::kNumKeys;
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  return r.number;
}

Result<std::vector<std::string>> TcpStoreClient::MultiGet(const std::vector<std::string>& keys,
                                                          Deadline deadline) {
  p::Request q;
  q.op = p::Op::kMultiGet;
  q.keys = keys;
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  if (r.values.size() != keys.size()) {
    return Status::Internal("store at " + address_ + " answered MULTI_GET of " +
                            std::to_string(keys.size()) + " keys with " +
                            std::to_string(r.values.size()) + " values");
  }
  return std::move(r.values);
}

Status TcpStoreClient::MultiSet(const std::vector<std::string>& keys,
                                const std::vector<std::string>& values, Deadline deadline) {
  if (keys.size() != values.size()) {
    return Status::InvalidArgument("MULTI_SET with " + std::to_string(keys.size()) + " keys but " +
                                   std::to_string(values.size()) + " values");
  }
  p::Request q;
  q.op = p::Op::kMultiSet;
  q.keys = keys;
  q.values = values;
  return Call(std::move(q), deadline).status();
}

Status TcpStoreClient::Append(const std::string& key, const std::string& value, Deadline deadline) {
  p::Request q;
  q.op = p::Op::kAppend;
  q.keys = {key};
  q.values = {value};
  return Call(std::move(q), deadline).status();
}

Result<std::vector<std::string>> TcpStoreClient::ListKeys(Deadline deadline) {
  p::Request q;
  q.op = p::Op::kListKeys;
  BRAID_ASSIGN_OR_RETURN(p::Response r, Call(std::move(q), deadline));
  return std::move(r.values);
}

Status TcpStoreClient::Barrier(const std::string& key, int n, Deadline deadline) {
  if (n < 1) return Status::InvalidArgument("barrier " + p::PrintableKey(key) + " with n < 1");
  p::Request q;
  q.op = p::Op::kBarrier;
  q.keys = {key};
  q.number = n;
  return Call(std::move(q), deadline).status();
}

}  // namespace braid::rendezvous
