// What a misbehaving peer can do to the store: half frames, vanishing while parked, malformed
// and oversized frames, huge values, a server that stops answering. In every case only the
// offending connection suffers and everyone else is served.
//
// Catch2 v2 is not thread-safe: worker threads only record results; the main thread asserts.
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"

namespace braid::rendezvous {
namespace {

namespace p = protocol;
using testing::Client;
using testing::Eventually;
using testing::RawSocket;
using testing::Soon;
using testing::StartServer;

std::string U32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string Header(uint32_t magic, uint16_t version, uint16_t kind, uint32_t len) {
  return U32(magic) + U32((uint32_t{version} << 16) | kind) + U32(5) + U32(len);
}

// The server still serves a fresh, well-behaved client.
bool StillServes(int port) {
  auto store = Client(port);
  if (!store) return false;
  std::string key = "alive-" + std::to_string(reinterpret_cast<uintptr_t>(store.get()));
  return store->Set(key, "yes", Soon()).ok() && store->Get(key, Soon()).ok();
}

p::Request HelloRequest() {
  p::Request q;
  q.op = p::Op::kHello;
  q.request_id = 1;
  q.nonce = std::string(p::kAuthBytes, 'n');
  return q;
}

p::Request AuthRequest(const std::string& proof) {
  p::Request q;
  q.op = p::Op::kAuth;
  q.request_id = 2;
  q.proof = proof;
  return q;
}

p::Request GetRequest(const std::string& key, int64_t timeout_ms) {
  p::Request q;
  q.op = p::Op::kGet;
  q.request_id = 2;
  q.keys = {key};
  q.timeout_ms = timeout_ms;
  return q;
}

TEST_CASE("half a frame, then gone: nobody else notices", "[store][robustness]") {
  auto server = StartServer();
  REQUIRE(server);
  auto bystander = Client(server->port());
  REQUIRE(bystander);
  REQUIRE(bystander->Set("k", "v", Soon()).ok());

  std::string set;
  {
    p::Request q;
    q.op = p::Op::kSet;
    q.request_id = 2;
    q.keys = {"half"};
    q.values = {std::string(1000, 'x')};
    set = p::EncodeRequest(q);
  }
  for (size_t cut : {size_t{3}, p::kHeaderBytes, p::kHeaderBytes + 10, set.size() - 1}) {
    INFO("cut after " << cut << " bytes");
    RawSocket raw(server->port());
    REQUIRE(raw.ok());
    REQUIRE(raw.Hello());
    REQUIRE(raw.Send(set.substr(0, cut)));
    raw.Close();
    CHECK(bystander->Get("k", Soon()).value() == "v");
  }
  CHECK(Eventually([&] { return server->Stats().open_connections == 1; }));
  CHECK(bystander->Check({"half"}, Soon()).value() == false);  // no partial frame was applied
  CHECK(StillServes(server->port()));
}

TEST_CASE("a client that dies while parked in a get leaves no waiter behind",
          "[store][robustness]") {
  auto server = StartServer();
  REQUIRE(server);
  auto bystander = Client(server->port());
  REQUIRE(bystander);

  // A raw client parks a GET without a timeout, and a real client parks one too.
  RawSocket raw(server->port());
  REQUIRE(raw.ok());
  REQUIRE(raw.Hello());
  REQUIRE(raw.Send(p::EncodeRequest(GetRequest("later", p::kNoTimeout))));
  Result<std::string> patient = Status::Internal("not run");
  std::thread waiter([&] {
    auto other = Client(server->port());
    patient = other ? other->Get("later", Soon()) : Status::Internal("no client");
  });
  REQUIRE(Eventually([&] { return server->Stats().parked_waiters == 2; }));
  raw.Close();
  CHECK(Eventually([&] { return server->Stats().parked_waiters == 1; }));

  // Others are unaffected: the real waiter is still answered.
  REQUIRE(bystander->Set("later", "value", Soon()).ok());
  waiter.join();
  CHECK(patient.value() == "value");
  CHECK(server->Stats().parked_waiters == 0);

  // A client dying while parked in a barrier withdraws its arrival.
  RawSocket quitter(server->port());
  REQUIRE(quitter.ok());
  REQUIRE(quitter.Hello());
  p::Request barrier;
  barrier.op = p::Op::kBarrier;
  barrier.request_id = 3;
  barrier.keys = {"b"};
  barrier.number = 2;
  REQUIRE(quitter.Send(p::EncodeRequest(barrier)));
  REQUIRE(Eventually([&] { return server->Stats().parked_waiters == 1; }));
  quitter.Close();
  REQUIRE(Eventually([&] { return server->Stats().parked_waiters == 0; }));
  Status alone = bystander->Barrier("b", 2, Deadline::AfterMs(300));
  CHECK(alone.code() == Code::kTimeout);
  CHECK_THAT(alone.message(), Catch::Contains("1 of 2 arrived"));
}

TEST_CASE("malformed frames close only that connection, with a reason", "[store][robustness]") {
  auto server = StartServer();
  REQUIRE(server);
  auto bystander = Client(server->port());
  REQUIRE(bystander);
  REQUIRE(bystander->Set("k", "v", Soon()).ok());
  int64_t closed_before = server->Stats().connections_closed_for_errors;

  struct Case {
    const char* name;
    bool hello_first;
    std::string bytes;
    const char* reply_contains;  // nullptr: no reply expected, just the close
  };
  std::string big_count_check = Header(p::kMagic, p::kVersion, 7, 4) + U32(0xffffffffu);
  std::vector<Case> cases = {
      {"bad magic", false, Header(0x47455420, p::kVersion, 2, 0), nullptr},
      {"HTTP", false, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", nullptr},
      {"bad version", false, Header(p::kMagic, 7, 1, 0), "version 7"},
      {"absurd length", true, Header(p::kMagic, p::kVersion, 2, 0xffffffffu), "exceeds"},
      {"unknown op", true, Header(p::kMagic, p::kVersion, 99, 0), "kind"},
      {"response kind", true, Header(p::kMagic, p::kVersion, 2 | p::kResponseFlag, 0), "kind"},
      {"count beyond body", true, big_count_check, "CHECK"},
      {"key longer than body", true, Header(p::kMagic, p::kVersion, 2, 8) + U32(100) + "abcd",
       "SET"},
      {"op before HELLO", false, p::EncodeRequest(GetRequest("k", 0)), "before HELLO"},
      {"second HELLO", true, p::EncodeRequest(HelloRequest()), "after the handshake"},
      {"AUTH before HELLO", false, p::EncodeRequest(AuthRequest(std::string(32, 'p'))),
       "before HELLO"},
      {"GET between HELLO and AUTH", false,
       p::EncodeRequest(HelloRequest()) + p::EncodeRequest(GetRequest("k", 0)),
       "where AUTH was expected"},
      {"a wrong proof", false,
       p::EncodeRequest(HelloRequest()) + p::EncodeRequest(AuthRequest(std::string(32, 'p'))),
       "wrong secret"},
      {"a large frame before authenticating", false,
       Header(p::kMagic, p::kVersion, 2, 1000), "exceeds the limit of 256"},
      {"a short nonce", false, Header(p::kMagic, p::kVersion, 1, 8) + U32(4) + "abcd",
       "nonce of 4 bytes"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    RawSocket raw(server->port());
    REQUIRE(raw.ok());
    if (c.hello_first) REQUIRE(raw.Hello());
    REQUIRE(raw.Send(c.bytes));
    bool closed = false;
    std::string reply = raw.ReadUntilClosed(3000, &closed);
    CHECK(closed);
    if (c.reply_contains != nullptr) {
      CHECK_THAT(reply, Catch::Contains(c.reply_contains));
    }
    CHECK(bystander->Get("k", Soon()).value() == "v");
  }
  CHECK(server->Stats().connections_closed_for_errors - closed_before ==
        static_cast<int64_t>(cases.size()));

  // A second request while one is parked breaks the one-at-a-time rule: closed.
  RawSocket pipeliner(server->port());
  REQUIRE(pipeliner.ok());
  REQUIRE(pipeliner.Hello());
  REQUIRE(pipeliner.Send(p::EncodeRequest(GetRequest("never", p::kNoTimeout)) +
                         p::EncodeRequest(GetRequest("k", p::kNoTimeout))));
  bool closed = false;
  pipeliner.ReadUntilClosed(3000, &closed);
  CHECK(closed);
  CHECK(Eventually([&] { return server->Stats().parked_waiters == 0; }));
  CHECK(StillServes(server->port()));
}

TEST_CASE("pipelined immediate requests are answered in order", "[store][robustness]") {
  auto server = StartServer();
  REQUIRE(server);
  RawSocket raw(server->port());
  REQUIRE(raw.ok());
  REQUIRE(raw.Hello());
  std::string burst;
  for (uint32_t i = 0; i < 50; ++i) {
    p::Request add;
    add.op = p::Op::kAdd;
    add.request_id = 100 + i;
    add.keys = {"n"};
    add.number = 1;
    burst += p::EncodeRequest(add);
  }
  REQUIRE(raw.Send(burst));
  std::vector<std::string> problems;
  for (uint32_t i = 0; i < 50; ++i) {
    p::FrameHeader header;
    std::string body;
    if (!raw.ReadFrame(3000, &header, &body)) {
      problems.push_back("no reply " + std::to_string(i));
      break;
    }
    auto reply =
        p::DecodeResponse(p::Op::kAdd, reinterpret_cast<const uint8_t*>(body.data()), body.size());
    if (header.request_id != 100 + i || !reply.ok() || reply->number != i + 1) {
      problems.push_back("reply " + std::to_string(i) + " out of order");
    }
  }
  CHECK(problems.empty());
}

TEST_CASE("64 MiB values round-trip; larger ones are refused cleanly", "[store][robustness]") {
  auto server = StartServer();
  REQUIRE(server);
  auto store = Client(server->port());
  REQUIRE(store);
  std::string big(64u << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i / 4096 * 31 + 7);
  big.back() = 'Z';
  REQUIRE(store->Set("big", big, Soon(20000)).ok());
  Result<std::string> back = store->Get("big", Soon(20000));
  REQUIRE(back.ok());
  CHECK(back.value().size() == big.size());
  CHECK(back.value() == big);

  big.push_back('!');
  Status too_big = store->Set("bigger", big, Soon());
  CHECK(too_big.code() == Code::kInvalidArgument);
  CHECK_THAT(too_big.message(), Catch::Contains("limit"));
  // Append may not grow a value past the limit either.
  Status append = store->Append("big", "more", Soon());
  CHECK(append.code() == Code::kInvalidArgument);
  CHECK(store->Set("small", "ok", Soon()).ok());  // the client is still usable

  // A raw peer announcing (and then sending) an oversized frame is cut off.
  RawSocket raw(server->port());
  REQUIRE(raw.ok());
  REQUIRE(raw.Hello());
  REQUIRE(raw.Send(Header(p::kMagic, p::kVersion, 2, (64u << 20) + (1u << 20) + 1)));
  bool closed = false;
  raw.ReadUntilClosed(3000, &closed);
  CHECK(closed);
  CHECK(StillServes(server->port()));
}

TEST_CASE("small max_value_bytes is enforced on both sides", "[store][robustness]") {
  StoreServerOptions options;
  options.max_value_bytes = 1000;
  auto server = StartServer(options);
  REQUIRE(server);
  auto store = Client(server->port());
  REQUIRE(store);
  CHECK(store->Set("k", std::string(1000, 'a'), Soon()).ok());
  CHECK(store->Set("k", std::string(1001, 'a'), Soon()).code() == Code::kInvalidArgument);
  CHECK(store->Get("k", Soon()).value().size() == 1000);
}

// A fake store that greets and then never answers: the client's own deadline must end calls,
// and the next call must use a new connection.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~SilentServer() {
    stop_ = true;
    thread_.join();
    for (int fd : conns_) ::close(fd);
    ::close(fd_);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  void Run() {
    while (!stop_) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      conns_.push_back(c);
      accepted_++;
      // Answer HELLO and AUTH as a server with the empty secret would; then stay silent.
      std::string hello = ReadFrame(c);
      if (hello.size() != p::kHeaderBytes + 4 + p::kAuthBytes) continue;
      const std::string client_nonce = hello.substr(p::kHeaderBytes + 4);
      const std::string server_nonce(p::kAuthBytes, 's');
      crypto::Digest proof = crypto::ChallengeProof("", crypto::ProofRole::kServer,
                                                    p::kAuthContext, client_nonce, server_nonce);
      p::Response challenge;
      challenge.values = {server_nonce, std::string(proof.begin(), proof.end())};
      Answer(c, p::Op::kHello, hello, challenge);
      std::string auth = ReadFrame(c);
      p::Response welcome;
      welcome.number = 1 << 20;
      Answer(c, p::Op::kAuth, auth, welcome);
    }
  }
  // Reads one whole request frame (blocking); "" if the peer went away.
  static std::string ReadFrame(int c) {
    std::string frame;
    size_t need = p::kHeaderBytes;
    char buf[4096];
    while (frame.size() < need) {
      ssize_t n = ::recv(c, buf, std::min(sizeof(buf), need - frame.size()), 0);
      if (n <= 0) return "";
      frame.append(buf, static_cast<size_t>(n));
      if (frame.size() == p::kHeaderBytes) {
        need += (uint32_t{static_cast<uint8_t>(frame[12])} << 24) |
                (uint32_t{static_cast<uint8_t>(frame[13])} << 16) |
                (uint32_t{static_cast<uint8_t>(frame[14])} << 8) | static_cast<uint8_t>(frame[15]);
      }
    }
    return frame;
  }
  // Replies to `request` (its request id) with `response`.
  static void Answer(int c, p::Op op, const std::string& request, const p::Response& response) {
    if (request.size() < p::kHeaderBytes) return;
    std::string frame = p::EncodeResponse(op, 1, response).value();
    for (int i = 8; i < 12; ++i) frame[i] = request[i];
    (void)::send(c, frame.data(), frame.size(), MSG_NOSIGNAL);
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> conns_;
  std::thread thread_;
};

TEST_CASE("a silent server: every call ends at its deadline and reconnects",
          "[store][robustness]") {
  SilentServer silent;
  auto store = TcpStoreClient::Connect("127.0.0.1", silent.port(), "", Soon());
  REQUIRE(store.ok());
  CHECK(silent.accepted() == 1);
  auto start = Deadline::Clock::now();
  Status set = (*store)->Set("key-a", "v", Deadline::AfterMs(200));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start);
  CHECK(set.code() == Code::kTimeout);
  CHECK_THAT(set.message(), Catch::Contains("key-a"));
  CHECK_THAT(set.message(), Catch::Contains("127.0.0.1:" + std::to_string(silent.port())));
  CHECK(ms.count() < 1000);
  Status barrier = (*store)->Barrier("bar", 4, Deadline::AfterMs(200));
  CHECK(barrier.code() == Code::kTimeout);
  CHECK_THAT(barrier.message(), Catch::Contains("'bar'"));
  CHECK(silent.accepted() == 2);  // the timed-out connection was replaced
}

}  // namespace
}  // namespace braid::rendezvous
