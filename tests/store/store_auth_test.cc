// Store authentication: the HELLO/AUTH challenge-response over the job's secret. The secret never
// travels; wrong secrets, replayed handshakes, impostor servers and silent strangers are refused
// and the server keeps serving everyone else.
//
// Catch2 v2 is not thread-safe: helper threads only record; the main thread asserts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <string>
#include <thread>

#include "tests/store/store_test_util.h"

namespace braid::rendezvous {
namespace {

namespace p = protocol;
using testing::Client;
using testing::Eventually;
using testing::RawSocket;
using testing::Soon;
using testing::StartServer;

// A listening IPv4 loopback socket on an ephemeral port; -1 on failure.
int ListenLoopback(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// Relays one connection at a time between a client and the server at `target_port`, recording
// every byte each way: what an eavesdropper on the network would capture.
class RecordingProxy {
 public:
  explicit RecordingProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = ListenLoopback(&port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~RecordingProxy() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  std::string client_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return client_bytes_;
  }
  std::string server_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return server_bytes_;
  }

 private:
  void Run() {
    while (!stop_) {
      pollfd lp{listen_fd_, POLLIN, 0};
      if (::poll(&lp, 1, 20) <= 0) continue;
      int c = ::accept(listen_fd_, nullptr, nullptr);
      if (c < 0) continue;
      RawSocket upstream(target_port_);
      if (!upstream.ok()) {
        ::close(c);
        continue;
      }
      int s = upstream.fd();
      bool open = true;
      while (open && !stop_) {
        pollfd fds[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
        if (::poll(fds, 2, 20) <= 0) continue;
        char buf[65536];
        for (int i = 0; i < 2 && open; ++i) {
          if (fds[i].revents == 0) continue;
          int from = i == 0 ? c : s;
          int to = i == 0 ? s : c;
          ssize_t n = ::recv(from, buf, sizeof(buf), 0);
          if (n > 0) {  // recorded before it is passed on, so a reader never misses bytes
            std::lock_guard<std::mutex> lock(mutex_);
            (i == 0 ? client_bytes_ : server_bytes_).append(buf, static_cast<size_t>(n));
          }
          if (n <= 0 || ::send(to, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) {
            open = false;
            break;
          }
        }
      }
      ::close(c);
    }
  }

  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::string client_bytes_;
  std::string server_bytes_;
  std::thread thread_;
};

// The length of the first `frames` whole frames at the front of `bytes`.
size_t FramesLength(const std::string& bytes, int frames) {
  size_t at = 0;
  for (int i = 0; i < frames && at + p::kHeaderBytes <= bytes.size(); ++i) {
    auto check = p::ParseHeader(reinterpret_cast<const uint8_t*>(bytes.data()) + at,
                                bytes.size() - at, p::kMaxResponseBodyBytes, true);
    at += p::kHeaderBytes + check.header.body_bytes;
  }
  return at;
}

const char kSecret[] = "correct horse battery staple 0123456789";

TEST_CASE("auth: the right secret gets in without ever travelling; wrong ones are refused",
          "[store][auth]") {
  StoreServerOptions options;
  options.secret = kSecret;
  auto server = StartServer(options);
  REQUIRE(server);
  RecordingProxy proxy(server->port());

  auto store = TcpStoreClient::Connect("127.0.0.1", proxy.port(), kSecret, Soon());
  REQUIRE(store.ok());
  REQUIRE((*store)->Set("k", "v", Soon()).ok());
  CHECK((*store)->Get("k", Soon()).value() == "v");
  // Neither direction carried the secret, nor its hex form.
  const std::string hex = crypto::ToHex(kSecret, sizeof(kSecret) - 1);
  CHECK(proxy.client_bytes().find("horse") == std::string::npos);
  CHECK(proxy.client_bytes().find(hex.substr(0, 16)) == std::string::npos);
  CHECK(proxy.server_bytes().find("horse") == std::string::npos);
  CHECK(proxy.client_bytes().size() > 2 * (p::kHeaderBytes + 4 + p::kAuthBytes));

  // Another job's secret, and none at all: refused with a reason, and the job goes on.
  auto wrong = TcpStoreClient::Connect("127.0.0.1", server->port(), "another job", Soon());
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == Code::kInvalidUsage);
  CHECK_THAT(wrong.status().message(), Catch::Contains("wrong secret"));
  CHECK_THAT(wrong.status().message(),
             Catch::Contains("127.0.0.1:" + std::to_string(server->port())));
  auto none = TcpStoreClient::Connect("127.0.0.1", server->port(), "", Soon());
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::Contains("BRAID_SECRET"));
  CHECK((*store)->Set("k2", "v2", Soon()).ok());

  StoreServerStats stats = server->Stats();
  CHECK(stats.wrong_secrets == 2);
  CHECK(stats.handshakes_refused == 2);
  CHECK(stats.connections_authenticated == 1);
}

TEST_CASE("auth: captured handshake bytes replayed to the server are refused", "[store][auth]") {
  StoreServerOptions options;
  options.secret = kSecret;
  auto server = StartServer(options);
  REQUIRE(server);
  std::string captured;
  {
    RecordingProxy proxy(server->port());
    auto store = TcpStoreClient::Connect("127.0.0.1", proxy.port(), kSecret, Soon());
    REQUIRE(store.ok());
    REQUIRE((*store)->Set("victim", "original", Soon()).ok());
    captured = proxy.client_bytes();  // HELLO, AUTH, SET
  }
  auto owner = Client(server->port(), kSecret);
  REQUIRE(owner);
  REQUIRE(owner->Set("victim", "changed", Soon()).ok());
  const int64_t wrong_before = server->Stats().wrong_secrets;

  // The whole capture at once, and frame by frame as a careful attacker would.
  RawSocket replay(server->port());
  REQUIRE(replay.ok());
  REQUIRE(replay.Send(captured));
  bool closed = false;
  std::string reply = replay.ReadUntilClosed(5000, &closed);
  CHECK(closed);
  CHECK_THAT(reply, Catch::Contains("wrong secret"));

  RawSocket stepwise(server->port());
  REQUIRE(stepwise.ok());
  const size_t hello_bytes = FramesLength(captured, 1);
  p::Response challenge;
  REQUIRE(stepwise.Send(captured.substr(0, hello_bytes)));
  p::FrameHeader header;
  std::string body;
  REQUIRE(stepwise.ReadFrame(5000, &header, &body));
  REQUIRE(stepwise.Send(captured.substr(hello_bytes)));
  reply = stepwise.ReadUntilClosed(5000, &closed);
  CHECK(closed);
  CHECK_THAT(reply, Catch::Contains("wrong secret"));

  CHECK(server->Stats().wrong_secrets == wrong_before + 2);
  CHECK(owner->Get("victim", Soon()).value() == "changed");  // the replayed SET never ran
}

TEST_CASE("auth: a server replaying a captured challenge is refused by the client",
          "[store][auth]") {
  StoreServerOptions options;
  options.secret = kSecret;
  auto server = StartServer(options);
  REQUIRE(server);
  std::string captured;
  {
    RecordingProxy proxy(server->port());
    auto store = TcpStoreClient::Connect("127.0.0.1", proxy.port(), kSecret, Soon());
    REQUIRE(store.ok());
    captured = proxy.server_bytes();  // the HELLO and AUTH replies
  }
  REQUIRE(FramesLength(captured, 1) < captured.size());
  REQUIRE(FramesLength(captured, 2) == captured.size());

  // An impostor that does not know the secret plays back the real server's answers.
  int port = 0;
  int listen_fd = ListenLoopback(&port);
  REQUIRE(listen_fd >= 0);
  std::thread impostor([&] {
    int c = ::accept(listen_fd, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    if (::recv(c, buf, sizeof(buf), 0) > 0) {
      (void)::send(c, captured.data(), captured.size(), MSG_NOSIGNAL);
      while (::recv(c, buf, sizeof(buf), 0) > 0) {
      }
    }
    ::close(c);
  });
  auto fooled = TcpStoreClient::Connect("127.0.0.1", port, kSecret, Soon());
  impostor.join();
  ::close(listen_fd);
  REQUIRE_FALSE(fooled.ok());
  CHECK(fooled.status().code() == Code::kInvalidUsage);
  CHECK_THAT(fooled.status().message(), Catch::Contains("could not prove"));
}

TEST_CASE("auth: the empty secret on both sides means no authentication", "[store][auth]") {
  auto open_server = StartServer();
  REQUIRE(open_server);
  auto anyone = Client(open_server->port(), "");
  REQUIRE(anyone);
  CHECK(anyone->Set("k", "v", Soon()).ok());
  // A client that has a secret does not trust a server without one.
  auto careful = TcpStoreClient::Connect("127.0.0.1", open_server->port(), kSecret, Soon());
  CHECK_FALSE(careful.ok());
  CHECK(anyone->Get("k", Soon()).value() == "v");
}

TEST_CASE("auth: connections that never authenticate are closed after the handshake timeout",
          "[store][auth]") {
  StoreServerOptions options;
  options.secret = kSecret;
  options.handshake_timeout_ms = 300;
  auto server = StartServer(options);
  REQUIRE(server);
  auto member = Client(server->port(), kSecret);
  REQUIRE(member);

  RawSocket silent(server->port());
  REQUIRE(silent.ok());
  RawSocket half(server->port());
  REQUIRE(half.ok());
  REQUIRE_FALSE(half.SendHello().empty());  // HELLO answered, AUTH never sent
  bool closed_silent = false;
  bool closed_half = false;
  silent.ReadUntilClosed(5000, &closed_silent);
  half.ReadUntilClosed(5000, &closed_half);
  CHECK(closed_silent);
  CHECK(closed_half);
  CHECK(server->Stats().handshakes_refused == 2);

  // An authenticated connection is not subject to the handshake timeout.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(member->Set("still", "here", Soon()).ok());
  CHECK(Eventually([&] { return server->Stats().open_connections == 1; }));
}

TEST_CASE("auth: a v1 client's HELLO (secret in clear) is refused with the version",
          "[store][auth]") {
  StoreServerOptions options;
  options.secret = kSecret;
  auto server = StartServer(options);
  REQUIRE(server);
  // Version 1 HELLO: header with version 1, body = bytes secret.
  std::string body;
  const uint32_t n = sizeof(kSecret) - 1;
  for (int s = 24; s >= 0; s -= 8) body.push_back(static_cast<char>(n >> s));
  body += kSecret;
  std::string frame = p::EncodeRequest([] {
    p::Request hello;
    hello.op = p::Op::kHello;
    hello.request_id = 1;
    hello.nonce = std::string(p::kAuthBytes, 'x');
    return hello;
  }());
  frame[5] = 1;  // version 1
  frame.resize(12);
  for (int s = 24; s >= 0; s -= 8) frame.push_back(static_cast<char>(body.size() >> s));
  frame += body;
  RawSocket old(server->port());
  REQUIRE(old.ok());
  // The header alone is refused (sending the body too would race the close with a reset).
  REQUIRE(old.Send(frame.substr(0, p::kHeaderBytes)));
  bool closed = false;
  std::string reply = old.ReadUntilClosed(5000, &closed);
  CHECK(closed);
  CHECK_THAT(reply, Catch::Contains("version 1"));
  CHECK(server->Stats().handshakes_refused == 1);
}

}  // namespace
}  // namespace braid::rendezvous
