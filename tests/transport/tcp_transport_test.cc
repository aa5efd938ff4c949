// Multi-rank tests of the TCP transport: ranks are threads of this process, each with its own
// TcpTransport on loopback. Catch2 v2 is not thread-safe, so rank threads only record what they
// saw; assertions run on the main thread after the join.
#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/base/hmac_sha256.h"
#include "core/base/net_interfaces.h"
#include "tests/harness/transport_mesh.h"
#include "transport/tcp/wire.h"

namespace braid::transport::tcp {
namespace {

constexpr int64_t kTestTimeoutMs = 20000;

TransportContext Context(int rank, int size, uint64_t comm_id, const std::string& ifname = "lo",
                         const std::string& family = "") {
  TransportContext context;
  context.rank = rank;
  context.size = size;
  context.comm_id = comm_id;
  context.config.socket_ifname = ifname;
  context.config.socket_family = family;
  return context;
}

// A full mesh of `size` ranks: transports[r] and conns[r][p] (null for p == r).
struct Mesh {
  std::vector<std::unique_ptr<TcpTransport>> transports;
  std::vector<std::vector<std::unique_ptr<Connection>>> conns;
  std::string error;  // first failure, "" if all connected
};

std::vector<std::unique_ptr<TcpTransport>> MakeTransports(int size, uint64_t comm_id,
                                                          const std::string& ifname = "lo",
                                                          const std::string& family = "") {
  std::vector<std::unique_ptr<TcpTransport>> transports;
  for (int r = 0; r < size; ++r) {
    Result<std::unique_ptr<TcpTransport>> t =
        TcpTransport::Create(Context(r, size, comm_id, ifname, family));
    if (!t.ok()) FAIL("TcpTransport::Create: " << t.status().ToString());
    transports.push_back(std::move(t.value()));
  }
  return transports;
}

// Connects every pair (tests/harness/transport_mesh.h: each rank in a thread of its own).
Mesh ConnectMesh(std::vector<std::unique_ptr<TcpTransport>> transports) {
  Mesh mesh;
  mesh.transports = std::move(transports);
  mesh.error = ::braid::testing::ConnectEveryPair(mesh.transports, &mesh.conns, kTestTimeoutMs);
  return mesh;
}

Mesh MakeMesh(int size, uint64_t comm_id) { return ConnectMesh(MakeTransports(size, comm_id)); }

uint8_t PatternByte(size_t i, int src, int dst, size_t bytes) {
  return static_cast<uint8_t>((i * 131 + static_cast<size_t>(src) * 17 +
                               static_cast<size_t>(dst) * 29 + bytes * 7 + (i >> 11)) &
                              0xff);
}

std::vector<uint8_t> Pattern(size_t bytes, int src, int dst) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = PatternByte(i, src, dst, bytes);
  return data;
}

// "" if `data` holds the pattern, else where it differs first.
std::string CheckPattern(const std::vector<uint8_t>& data, int src, int dst) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != PatternByte(i, src, dst, data.size())) {
      return "message " + std::to_string(src) + "->" + std::to_string(dst) + " of " +
             std::to_string(data.size()) + " bytes differs at byte " + std::to_string(i);
    }
  }
  return "";
}

TEST_CASE("tcp: messages of many sizes arrive intact between every pair", "[tcp]") {
  const int size = GENERATE(2, 3);
  Mesh mesh = MakeMesh(size, 0x1234 + size);
  REQUIRE(mesh.error.empty());
  const std::vector<size_t> sizes = {0, 1, 7, 64 << 10, (16 << 20) + 3};

  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      // Sends to everyone, receives from everyone, all posted before any wait.
      std::vector<std::vector<uint8_t>> send_bufs;
      std::vector<std::vector<uint8_t>> recv_bufs;
      std::vector<std::pair<int, RequestPtr>> recvs;
      std::vector<RequestPtr> sends;
      send_bufs.reserve(size * sizes.size());
      recv_bufs.reserve(size * sizes.size());
      for (int p = 0; p < size; ++p) {
        if (p == r) continue;
        for (size_t k = 0; k < sizes.size(); ++k) {
          recv_bufs.emplace_back(sizes[k], 0xEE);
          recvs.emplace_back(p, mesh.conns[r][p]->PostRecv(recv_bufs.back().data(), sizes[k], k));
          send_bufs.push_back(Pattern(sizes[k], r, p));
          sends.push_back(mesh.conns[r][p]->PostSend(send_bufs.back().data(), sizes[k], k));
        }
      }
      for (auto& s : sends) {
        Status st = s->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok() && errors[r].empty()) errors[r] = "send: " + st.ToString();
      }
      for (size_t i = 0; i < recvs.size(); ++i) {
        Status st = recvs[i].second->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok()) {
          if (errors[r].empty()) errors[r] = "recv: " + st.ToString();
          continue;
        }
        std::string bad = CheckPattern(recv_bufs[i], recvs[i].first, r);
        if (!bad.empty() && errors[r].empty()) errors[r] = bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r << " of " << size);
    CHECK(errors[r] == "");
  }
}

TEST_CASE("tcp: many messages keep their order, sent before the receives are posted", "[tcp]") {
  Mesh mesh = MakeMesh(2, 77);
  REQUIRE(mesh.error.empty());
  constexpr int kCount = 3000;
  auto bytes_of = [](int i) { return static_cast<size_t>((i * 37) % 300 + (i % 100 == 0) * 200000); };

  std::vector<std::vector<uint8_t>> send_bufs(kCount);
  std::vector<RequestPtr> sends;
  for (int i = 0; i < kCount; ++i) {
    send_bufs[i] = Pattern(bytes_of(i), 0, i % 200);
    sends.push_back(mesh.conns[0][1]->PostSend(send_bufs[i].data(), send_bufs[i].size(), i));
  }
  // Let the sender run into TCP backpressure before anything is received.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  std::string error;
  std::vector<uint8_t> buf;
  for (int i = 0; i < kCount && error.empty(); ++i) {
    buf.assign(bytes_of(i), 0);
    RequestPtr recv = mesh.conns[1][0]->PostRecv(buf.data(), buf.size(), i);
    Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
    if (!st.ok()) {
      error = "recv " + std::to_string(i) + ": " + st.ToString();
    } else {
      error = CheckPattern(buf, 0, i % 200);
    }
  }
  CHECK(error == "");
  for (auto& s : sends) CHECK(s->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("tcp: tag and size mismatches fail the receive and name both sides", "[tcp]") {
  Mesh mesh = MakeMesh(2, 99);
  REQUIRE(mesh.error.empty());
  Connection& sender = *mesh.conns[0][1];
  Connection& receiver = *mesh.conns[1][0];
  std::vector<uint8_t> data = Pattern(1000, 0, 1);
  std::vector<uint8_t> buf(1000);

  SECTION("tag") {
    RequestPtr send = sender.PostSend(data.data(), data.size(), 5);
    RequestPtr recv = receiver.PostRecv(buf.data(), buf.size(), 6);
    Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
    CHECK(st.code() == Code::kInternalError);
    CHECK_THAT(st.message(), Catch::Contains("expected tag 6"));
    CHECK_THAT(st.message(), Catch::Contains("has tag 5"));
    CHECK_THAT(st.message(), Catch::Contains("rank 0"));
    CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  }
  SECTION("size") {
    RequestPtr send = sender.PostSend(data.data(), data.size(), 5);
    RequestPtr recv = receiver.PostRecv(buf.data(), 999, 5);
    Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
    CHECK(st.code() == Code::kInternalError);
    CHECK_THAT(st.message(), Catch::Contains("999 bytes"));
    CHECK_THAT(st.message(), Catch::Contains("1000 bytes"));
    CHECK_THAT(st.message(), Catch::Contains("rank 0"));
    CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  }
  // The refused message was dropped whole: the next one is received intact.
  std::vector<uint8_t> next = Pattern(70000, 0, 1);
  std::vector<uint8_t> next_buf(next.size());
  RequestPtr send = sender.PostSend(next.data(), next.size(), 8);
  RequestPtr recv = receiver.PostRecv(next_buf.data(), next_buf.size(), 8);
  REQUIRE(recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(next_buf, 0, 1) == "");
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

// ---- the caller-driven data path (tcp_connection.h) ----

TEST_CASE("tcp: a ring of large messages completes while each rank waits on its receive first",
          "[tcp]") {
  // Each rank's send to the right stalls on socket space while it waits on its receive from the
  // left: only a waiter that drives every connection of its transport keeps the ring moving.
  constexpr int kSize = 3;
  Mesh mesh = MakeMesh(kSize, 0x2146);
  REQUIRE(mesh.error.empty());
  const size_t bytes = (8 << 20) + 5;
  std::vector<std::string> errors(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      const int left = (r + kSize - 1) % kSize;
      const int right = (r + 1) % kSize;
      for (int round = 0; round < 3 && errors[r].empty(); ++round) {
        std::vector<uint8_t> out = Pattern(bytes, r, right);
        std::vector<uint8_t> in(bytes);
        RequestPtr recv = mesh.conns[r][left]->PostRecv(in.data(), in.size(), round);
        RequestPtr send = mesh.conns[r][right]->PostSend(out.data(), out.size(), round);
        Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok()) {
          errors[r] = "recv: " + st.ToString();
        } else {
          errors[r] = CheckPattern(in, left, r);
        }
        st = send->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok() && errors[r].empty()) errors[r] = "send: " + st.ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

TEST_CASE("tcp: requests completed by another thread wake their waiters", "[tcp]") {
  Mesh mesh = MakeMesh(2, 0x2147);
  REQUIRE(mesh.error.empty());
  constexpr int kWaiters = 4;
  constexpr size_t kBytes = 100000;
  std::vector<std::vector<uint8_t>> bufs(kWaiters, std::vector<uint8_t>(kBytes));
  std::vector<RequestPtr> recvs;
  for (int i = 0; i < kWaiters; ++i) {
    recvs.push_back(mesh.conns[1][0]->PostRecv(bufs[i].data(), kBytes, i));
  }
  // Each waiter waits on its own receive; whichever thread drives completes the others' too.
  std::vector<Status> results(kWaiters);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] { results[i] = recvs[i]->Wait(Deadline::AfterMs(kTestTimeoutMs)); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all of them asleep in poll()
  std::vector<std::vector<uint8_t>> data;
  std::vector<RequestPtr> sends;
  for (int i = 0; i < kWaiters; ++i) {
    data.push_back(Pattern(kBytes, 0, i));
    sends.push_back(mesh.conns[0][1]->PostSend(data.back().data(), kBytes, i));
  }
  for (auto& t : waiters) t.join();
  for (int i = 0; i < kWaiters; ++i) {
    INFO("waiter " << i);
    CHECK(results[i].ok());
    CHECK(CheckPattern(bufs[i], 0, i) == "");
    CHECK(sends[i]->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  }
}

TEST_CASE("tcp: Abort wakes every waiter of every connection at once", "[tcp]") {
  Mesh mesh = MakeMesh(3, 0x2148);
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> a(10), b(10), c(1 << 20);
  std::vector<uint8_t> big(64 << 20);
  std::vector<RequestPtr> requests = {
      mesh.conns[0][1]->PostRecv(a.data(), a.size(), 1),
      mesh.conns[0][1]->PostRecv(b.data(), b.size(), 2),
      mesh.conns[0][2]->PostRecv(c.data(), c.size(), 3),
      // Stalls on socket space: rank 2 never receives it.
      mesh.conns[0][2]->PostSend(big.data(), big.size(), 4),
  };
  std::vector<Status> results(requests.size());
  std::vector<int64_t> woke_ms(requests.size());
  std::atomic<int64_t> abort_at{0};
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < requests.size(); ++i) {
    waiters.emplace_back([&, i] {
      results[i] = requests[i]->Wait(Deadline::AfterMs(10 * 60 * 1000));
      woke_ms[i] = now_ms() - abort_at.load();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  abort_at = now_ms();
  std::thread aborter([&] { mesh.transports[0]->Abort(Status::Aborted("stop everything")); });
  aborter.join();
  for (auto& t : waiters) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].code() == Code::kAborted);
    CHECK_THAT(results[i].message(), Catch::Contains("stop everything"));
    CHECK(woke_ms[i] < 1000);
  }
}

TEST_CASE("tcp: a peer that hangs up while this rank waits elsewhere fails later sends to it",
          "[tcp]") {
  Mesh mesh = MakeMesh(3, 0x2149);
  REQUIRE(mesh.error.empty());
  // Rank 0 waits on rank 2 (nothing posted to rank 1) while rank 1 closes its link.
  std::vector<uint8_t> buf(16);
  RequestPtr recv = mesh.conns[0][2]->PostRecv(buf.data(), buf.size(), 1);
  Status waited;
  std::thread waiter([&] { waited = recv->Wait(Deadline::AfterMs(kTestTimeoutMs)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  mesh.conns[1][0].reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  RequestPtr late = mesh.conns[0][1]->PostSend(buf.data(), buf.size(), 2);
  CHECK(late->Test());
  CHECK(late->status().code() == Code::kRemoteError);
  CHECK_THAT(late->status().message(), Catch::Contains("connection to rank 1 lost"));
  std::vector<uint8_t> data = Pattern(16, 2, 0);
  RequestPtr send = mesh.conns[2][0]->PostSend(data.data(), data.size(), 1);
  waiter.join();
  CHECK(waited.ok());
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  // A receive on the dead link fails too (nothing was left to read).
  RequestPtr dead = mesh.conns[0][1]->PostRecv(buf.data(), buf.size(), 3);
  CHECK(dead->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kRemoteError);
}

TEST_CASE("tcp: a refused large message is dropped whole, small messages around it arrive",
          "[tcp]") {
  Mesh mesh = MakeMesh(2, 0x214A);
  REQUIRE(mesh.error.empty());
  Connection& sender = *mesh.conns[0][1];
  Connection& receiver = *mesh.conns[1][0];
  std::vector<uint8_t> small1 = Pattern(10, 0, 1);
  std::vector<uint8_t> large = Pattern((3 << 20) + 1, 0, 1);
  std::vector<uint8_t> small2 = Pattern(20, 0, 1);
  std::vector<RequestPtr> sends = {sender.PostSend(small1.data(), small1.size(), 1),
                                   sender.PostSend(large.data(), large.size(), 2),
                                   sender.PostSend(small2.data(), small2.size(), 3)};
  std::vector<uint8_t> got1(10), got_large(large.size()), got2(20);
  RequestPtr r1 = receiver.PostRecv(got1.data(), got1.size(), 1);
  RequestPtr r2 = receiver.PostRecv(got_large.data(), got_large.size(), 99);  // wrong tag
  RequestPtr r3 = receiver.PostRecv(got2.data(), got2.size(), 3);
  CHECK(r1->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  Status mismatch = r2->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(mismatch.code() == Code::kInternalError);
  CHECK_THAT(mismatch.message(), Catch::Contains("expected tag 99"));
  CHECK(r3->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(got1, 0, 1) == "");
  CHECK(CheckPattern(got2, 0, 1) == "");
  for (auto& s : sends) CHECK(s->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

// ---- raw sockets playing strangers ----

int DialRaw(const std::string& address) {
  Result<std::pair<std::string, uint16_t>> hp = ParseHostPort(address);
  if (!hp.ok()) return -1;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(hp.value().second);
  if (inet_pton(AF_INET, hp.value().first.c_str(), &sin.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A handshake frame of `step` from `sender` to `receiver` in communicator `comm_id`, as a peer of
// this build would send it.
HandshakeFrame Frame(handshake::Step step, uint64_t comm_id, int sender, int receiver) {
  HandshakeFrame f;
  f.magic = kProtocol.magic;
  f.step = static_cast<uint16_t>(step);
  f.comm_id = comm_id;
  f.sender_rank = sender;
  f.receiver_rank = receiver;
  return f;
}

// True if the other side closes `fd` within `ms`, having sent nothing but (at most) one whole
// refusal, whose reason lands in `*reason` (left empty when none came).
bool ClosedByPeer(int fd, int ms, std::string* reason = nullptr) {
  HandshakeFrame frame;
  size_t got = 0;
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, ms) <= 0) return false;
    // Past a whole frame, only the end of the stream may come (a 1-byte read must see it).
    const size_t want = got < sizeof(frame) ? sizeof(frame) - got : 1;
    char* into = got < sizeof(frame) ? reinterpret_cast<char*>(&frame) + got : nullptr;
    char extra;
    ssize_t n = recv(fd, into != nullptr ? into : &extra, want, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return got == 0 || got == sizeof(frame);
    if (n < 0 || into == nullptr) return false;
    got += static_cast<size_t>(n);
    if (got == sizeof(frame)) {
      if (!handshake::IsRefusal(kProtocol, frame)) return false;
      if (reason != nullptr) *reason = handshake::ReasonOf(frame);
    }
  }
}

TEST_CASE("tcp: strangers are refused and the real peers still connect", "[tcp]") {
  auto transports = MakeTransports(2, 0xC0FFEE);
  const std::string listener = transports[1]->LocalAddress();

  std::vector<std::pair<std::string, int>> strangers;
  {
    int fd = DialRaw(listener);
    const char garbage[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxx";
    CHECK(send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL) > 0);
    strangers.emplace_back("garbage", fd);
  }
  auto hello = [] { return Frame(handshake::Step::kHello, 0xC0FFEE, 0, 1); };
  {
    HandshakeFrame f = hello();
    f.magic = 0x12345678;
    int fd = DialRaw(listener);
    CHECK(send(fd, &f, sizeof(f), MSG_NOSIGNAL) == sizeof(f));
    strangers.emplace_back("bad magic", fd);
  }
  {
    HandshakeFrame f = hello();
    f.comm_id = 0xBAD;
    int fd = DialRaw(listener);
    CHECK(send(fd, &f, sizeof(f), MSG_NOSIGNAL) == sizeof(f));
    strangers.emplace_back("wrong comm_id", fd);
  }
  {
    HandshakeFrame f = hello();
    f.version = handshake::kVersion + 1;
    int fd = DialRaw(listener);
    CHECK(send(fd, &f, sizeof(f), MSG_NOSIGNAL) == sizeof(f));
    strangers.emplace_back("wrong version", fd);
  }
  {
    HandshakeFrame f = hello();
    f.receiver_rank = 7;
    int fd = DialRaw(listener);
    CHECK(send(fd, &f, sizeof(f), MSG_NOSIGNAL) == sizeof(f));
    strangers.emplace_back("wrong receiver", fd);
  }
  {
    HandshakeFrame f = hello();
    f.sender_rank = 1;  // a rank does not dial itself, nor do higher ranks dial lower ones
    int fd = DialRaw(listener);
    CHECK(send(fd, &f, sizeof(f), MSG_NOSIGNAL) == sizeof(f));
    strangers.emplace_back("wrong sender", fd);
  }
  {
    int fd = DialRaw(listener);
    CHECK(send(fd, "BR", 2, MSG_NOSIGNAL) == 2);
    shutdown(fd, SHUT_WR);  // half a hello, then EOF
    strangers.emplace_back("truncated hello", fd);
  }
  // A silent one stays connected (until the handshake timeout) without blocking anyone.
  int silent = DialRaw(listener);
  CHECK(silent >= 0);

  // Who speaks the handshake is told why (read whole: the listener read their whole frame);
  // strangers just see the close.
  const std::vector<std::pair<std::string, std::string>> told = {
      {"wrong comm_id", "communicator id 0xbad is not this communicator's"},
      {"wrong receiver", "addressed to rank 7"},
      {"wrong sender", "not a lower rank"},
  };
  for (auto& [what, fd] : strangers) {
    INFO(what);
    REQUIRE(fd >= 0);
    std::string reason;
    CHECK(ClosedByPeer(fd, 5000, &reason));
    for (const auto& [who, says] : told) {
      if (who == what) CHECK_THAT(reason, Catch::Contains(says));
    }
    if (what == "garbage" || what == "bad magic") CHECK(reason.empty());
    close(fd);
  }

  Mesh mesh = ConnectMesh(std::move(transports));
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> data = Pattern(4096, 0, 1);
  std::vector<uint8_t> buf(4096);
  RequestPtr send_req = mesh.conns[0][1]->PostSend(data.data(), data.size(), 1);
  RequestPtr recv_req = mesh.conns[1][0]->PostRecv(buf.data(), buf.size(), 1);
  REQUIRE(recv_req->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(buf, 0, 1) == "");
  CHECK(send_req->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  close(silent);
}

TEST_CASE("tcp: a connection from another communicator is refused at Connect", "[tcp]") {
  auto ours = MakeTransports(2, 1111);
  auto theirs = MakeTransports(2, 2222);
  // Rank 0 of communicator 2222 dials rank 1 of communicator 1111 (a stale address).
  auto c = theirs[0]->Connect(1, ours[1]->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kRemoteError);
  CHECK_THAT(c.status().message(), Catch::Contains("rank 1"));
  CHECK_THAT(c.status().message(), Catch::Contains("refused"));
  // The listener's reason travels in its refusal (transport/handshake.h).
  CHECK_THAT(c.status().message(), Catch::Contains("communicator id"));
}

TEST_CASE("tcp: Abort wakes a blocked Wait and a blocked Connect", "[tcp]") {
  Mesh mesh = MakeMesh(2, 5);
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> buf(100);
  RequestPtr recv = mesh.conns[1][0]->PostRecv(buf.data(), buf.size(), 1);
  Status waited;
  std::thread waiter([&] { waited = recv->Wait(Deadline::AfterMs(10 * 60 * 1000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  mesh.transports[1]->Abort(Status::Aborted("test says stop"));
  waiter.join();
  CHECK(waited.code() == Code::kAborted);
  CHECK_THAT(waited.message(), Catch::Contains("test says stop"));

  // Later requests and Connects fail at once.
  RequestPtr late = mesh.conns[1][0]->PostSend(buf.data(), buf.size(), 2);
  CHECK(late->Test());
  CHECK(late->status().code() == Code::kAborted);
  auto again = mesh.transports[1]->Connect(0, mesh.transports[0]->LocalAddress(),
                                           Deadline::AfterMs(kTestTimeoutMs));
  CHECK(again.status().code() == Code::kAborted);

  // A Connect waiting for a peer that never dials.
  auto lonely = MakeTransports(2, 6);
  Result<std::unique_ptr<Connection>> connected = Status::Internal("not run");
  std::thread connector([&] {
    connected = lonely[1]->Connect(0, lonely[0]->LocalAddress(), Deadline::AfterMs(10 * 60 * 1000));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  lonely[1]->Abort(Status::Aborted("give up"));
  connector.join();
  CHECK(connected.status().code() == Code::kAborted);
}

TEST_CASE("tcp: a destroyed peer fails the survivor's pending receive", "[tcp]") {
  const bool connection_first = GENERATE(true, false);
  Mesh mesh = MakeMesh(2, 8);
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> buf(1 << 20);
  RequestPtr recv = mesh.conns[0][1]->PostRecv(buf.data(), buf.size(), 3);
  std::vector<uint8_t> junk(1 << 20);
  // Rank 1 has a receive pending too, and data in flight, when it goes.
  RequestPtr peer_recv = mesh.conns[1][0]->PostRecv(junk.data(), junk.size(), 4);
  if (connection_first) {
    mesh.conns[1][0].reset();
    mesh.transports[1].reset();
  } else {
    mesh.transports[1].reset();
    CHECK(peer_recv->Test());
    RequestPtr after = mesh.conns[1][0]->PostSend(junk.data(), junk.size(), 5);
    CHECK(after->status().code() == Code::kAborted);
    mesh.conns[1][0].reset();
  }
  CHECK(peer_recv->Test());
  CHECK(peer_recv->status().code() == Code::kAborted);
  Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(st.code() == Code::kRemoteError);
  CHECK_THAT(st.message(), Catch::Contains("connection to rank 1 lost"));
  // And every later request on the dead link fails the same way.
  RequestPtr later = mesh.conns[0][1]->PostSend(buf.data(), 10, 9);
  CHECK(later->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kRemoteError);
}

TEST_CASE("tcp: Connect to a peer that never shows times out naming it", "[tcp]") {
  auto transports = MakeTransports(2, 10);
  SECTION("accepting side") {
    auto c = transports[1]->Connect(0, transports[0]->LocalAddress(), Deadline::AfterMs(300));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kTimeout);
    CHECK_THAT(c.status().message(), Catch::Contains("rank 1: no connection from rank 0"));
  }
  SECTION("dialing side, nobody listening") {
    // An address where nothing listens any more.
    std::string gone;
    {
      auto other = MakeTransports(1, 11);
      gone = other[0]->LocalAddress();
    }
    auto c = transports[0]->Connect(1, gone, Deadline::AfterMs(300));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kTimeout);
    CHECK_THAT(c.status().message(), Catch::Contains("rank 0: could not connect to rank 1"));
  }
  SECTION("bad arguments") {
    CHECK(transports[0]->Connect(0, "127.0.0.1:1", Deadline::AfterMs(100)).status().code() ==
          Code::kInvalidArgument);
    CHECK(transports[0]->Connect(1, "nonsense", Deadline::AfterMs(100)).status().code() ==
          Code::kInvalidArgument);
  }
}

TEST_CASE("tcp: ParseHostPort", "[tcp]") {
  auto ok = [](const std::string& text, const std::string& host, uint16_t port) {
    auto r = ParseHostPort(text);
    return r.ok() && r.value().first == host && r.value().second == port;
  };
  CHECK(ok("127.0.0.1:80", "127.0.0.1", 80));
  CHECK(ok("[::1]:65535", "::1", 65535));
  CHECK(ok("[fe80::1%eth0]:5", "fe80::1%eth0", 5));
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", ":80", "::1:80", "[::1]80", "[::1]:",
                          "1.2.3.4:0", "1.2.3.4:65536", "1.2.3.4:8x"}) {
    INFO(bad);
    CHECK_FALSE(ParseHostPort(bad).ok());
  }
}

TEST_CASE("tcp: BRAID_SOCKET_IFNAME picks the listening interface", "[tcp]") {
  auto t = TcpTransport::Create(Context(0, 1, 1, "=lo", "AF_INET"));
  REQUIRE(t.ok());
  CHECK(t.value()->LocalAddress().rfind("127.0.0.1:", 0) == 0);
  CHECK(std::string(t.value()->name()) == "tcp");

  auto none = TcpTransport::Create(Context(0, 1, 1, "braid_no_such_if"));
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == Code::kInvalidArgument);
  CHECK_THAT(none.status().message(), Catch::Contains("braid_no_such_if"));

  auto bad_rank = TcpTransport::Create(Context(2, 2, 1));
  CHECK(bad_rank.status().code() == Code::kInvalidArgument);
}

TEST_CASE("tcp: IPv6 loopback", "[tcp][ipv6]") {
  if (!ChooseAddress("lo", "AF_INET6").ok()) {
    FAIL("no ::1 on this host (IPv6 disabled?): TCP over IPv6 cannot be verified");
  }
  Mesh mesh = ConnectMesh(MakeTransports(2, 66, "lo", "AF_INET6"));
  REQUIRE(mesh.error.empty());
  CHECK(mesh.transports[0]->LocalAddress().rfind("[::1]:", 0) == 0);
  std::vector<uint8_t> data = Pattern(100000, 1, 0);
  std::vector<uint8_t> buf(data.size());
  RequestPtr send_req = mesh.conns[1][0]->PostSend(data.data(), data.size(), 4);
  RequestPtr recv_req = mesh.conns[0][1]->PostRecv(buf.data(), buf.size(), 4);
  REQUIRE(recv_req->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(buf, 1, 0) == "");
  CHECK(send_req->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("tcp: connections outlive their transport safely", "[tcp]") {
  Mesh mesh = MakeMesh(3, 12);
  REQUIRE(mesh.error.empty());
  // Destroy all transports first, then use and destroy the connections.
  for (auto& t : mesh.transports) t.reset();
  char byte = 0;
  for (int r = 0; r < 3; ++r) {
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      RequestPtr req = mesh.conns[r][p]->PostRecv(&byte, 1, 0);
      CHECK(req->Test());
      // Aborted by its own transport's destruction, or lost when the peer's went first.
      Code code = req->status().code();
      CHECK((code == Code::kAborted || code == Code::kRemoteError));
      mesh.conns[r][p]->Close(Status::Aborted("done"));
    }
  }
  mesh.conns.clear();
}

// ---- authentication (wire.h: challenge-response over the communicator's secret) ----

std::unique_ptr<TcpTransport> SecretTransport(int rank, int size, uint64_t comm_id,
                                              const std::string& secret) {
  TransportContext context = Context(rank, size, comm_id);
  context.secret = secret;
  Result<std::unique_ptr<TcpTransport>> t = TcpTransport::Create(context);
  if (!t.ok()) return nullptr;
  return std::move(t.value());
}

bool SendFrame(int fd, const HandshakeFrame& f) {
  return send(fd, &f, sizeof(f), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(f));
}

// Reads one whole frame within `ms`; false if the peer closed or nothing came.
bool RecvFrame(int fd, HandshakeFrame* f, int ms) {
  size_t got = 0;
  auto* p = reinterpret_cast<uint8_t*>(f);
  while (got < sizeof(*f)) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, ms) <= 0) return false;
    ssize_t n = recv(fd, p + got, sizeof(*f) - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// Connects rank `low` (transport t0) with rank `high` (t1), sends one message low -> high and
// checks it arrives.
std::string Exchange(TcpTransport* t0, TcpTransport* t1, int low = 0, int high = 1) {
  std::unique_ptr<Connection> c0;
  std::unique_ptr<Connection> c1;
  std::string error;
  std::thread accept([&] {
    auto c = t1->Connect(low, t0->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs));
    if (c.ok()) c1 = std::move(c.value()); else error = c.status().ToString();
  });
  auto c = t0->Connect(high, t1->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs));
  accept.join();
  if (!c.ok()) return c.status().ToString();
  if (!error.empty()) return error;
  c0 = std::move(c.value());
  std::vector<uint8_t> data = Pattern(1000, 0, 1);
  std::vector<uint8_t> buf(1000);
  RequestPtr send_req = c0->PostSend(data.data(), data.size(), 5);
  RequestPtr recv_req = c1->PostRecv(buf.data(), buf.size(), 5);
  Status s = recv_req->Wait(Deadline::AfterMs(kTestTimeoutMs));
  if (!s.ok()) return s.ToString();
  if (!send_req->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok()) return "send failed";
  return CheckPattern(buf, 0, 1);
}

TEST_CASE("tcp: a rank holding another secret is refused, and the right one still connects",
          "[tcp][auth]") {
  auto listener = SecretTransport(1, 2, 0xAB, "our secret");
  auto intruder = SecretTransport(0, 2, 0xAB, "their secret");  // same comm id, other job
  auto member = SecretTransport(0, 2, 0xAB, "our secret");
  REQUIRE(listener);
  REQUIRE(intruder);
  REQUIRE(member);
  auto refused = intruder->Connect(1, listener->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kRemoteError);
  CHECK_THAT(refused.status().message(), Catch::Contains("different secrets"));
  CHECK_THAT(refused.status().message(), Catch::Contains(listener->LocalAddress()));
  // No secret at all is refused too.
  auto anonymous = SecretTransport(0, 2, 0xAB, "");
  REQUIRE(anonymous);
  CHECK_FALSE(
      anonymous->Connect(1, listener->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs)).ok());
  // The listener kept going: the real rank 0 connects and data flows.
  CHECK(Exchange(member.get(), listener.get()) == "");
}

TEST_CASE("tcp: a captured handshake replayed to the listener is refused", "[tcp][auth]") {
  const uint64_t comm = 0xFEED;
  const std::string secret = "replay-test-secret";
  // Rank 0 is played by hand (its connection to rank 2 is captured and replayed); rank 1 is real.
  auto listener = SecretTransport(2, 3, comm, secret);
  auto member = SecretTransport(1, 3, comm, secret);
  REQUIRE(listener);
  REQUIRE(member);

  // A legitimate dialer, done by hand so its bytes can be captured: hello, then proof.
  int fd = DialRaw(listener->LocalAddress());
  REQUIRE(fd >= 0);
  constexpr size_t kAuthBytes = handshake::kAuthBytes;
  HandshakeFrame hello = Frame(handshake::Step::kHello, comm, 0, 2);
  const std::string client_nonce = crypto::NewNonce().value();
  std::memcpy(hello.nonce, client_nonce.data(), kAuthBytes);
  REQUIRE(SendFrame(fd, hello));
  HandshakeFrame challenge;
  REQUIRE(RecvFrame(fd, &challenge, 5000));
  CHECK(challenge.step == static_cast<uint16_t>(handshake::Step::kChallenge));
  const std::string server_nonce(reinterpret_cast<const char*>(challenge.nonce), kAuthBytes);
  const std::string auth_context = handshake::ProofContext(kProtocol, comm, 0, 2);
  crypto::Digest server_proof = crypto::ChallengeProof(secret, crypto::ProofRole::kServer,
                                                       auth_context, client_nonce, server_nonce);
  CHECK(std::memcmp(challenge.proof, server_proof.data(), kAuthBytes) == 0);
  HandshakeFrame proof = Frame(handshake::Step::kProof, comm, 0, 2);
  crypto::Digest client_proof = crypto::ChallengeProof(secret, crypto::ProofRole::kClient,
                                                       auth_context, client_nonce, server_nonce);
  std::memcpy(proof.proof, client_proof.data(), kAuthBytes);
  REQUIRE(SendFrame(fd, proof));
  HandshakeFrame answer;
  REQUIRE(RecvFrame(fd, &answer, 5000));
  CHECK(answer.step == static_cast<uint16_t>(handshake::Step::kAccept));
  close(fd);
  std::string captured(reinterpret_cast<const char*>(&hello), sizeof(hello));
  captured.append(reinterpret_cast<const char*>(&proof), sizeof(proof));
  CHECK(captured.find(secret) == std::string::npos);

  // Replayed by someone who does not know the secret: the listener's nonce is new, so the old
  // proof is wrong; it says so and closes.
  int replay = DialRaw(listener->LocalAddress());
  REQUIRE(replay >= 0);
  REQUIRE(send(replay, captured.data(), captured.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(captured.size()));
  HandshakeFrame fresh_challenge;
  REQUIRE(RecvFrame(replay, &fresh_challenge, 5000));
  CHECK(std::memcmp(fresh_challenge.nonce, challenge.nonce, kAuthBytes) != 0);
  HandshakeFrame verdict;
  REQUIRE(RecvFrame(replay, &verdict, 5000));
  CHECK(verdict.step == static_cast<uint16_t>(handshake::Step::kRefuse));
  CHECK_THAT(handshake::ReasonOf(verdict), Catch::Contains("wrong secret"));
  CHECK(ClosedByPeer(replay, 5000));
  close(replay);

  // The listener kept going: the real rank 1 gets through.
  CHECK(Exchange(member.get(), listener.get(), 1, 2) == "");
}

TEST_CASE("tcp: a listener that cannot prove the secret is not trusted", "[tcp][auth]") {
  // An impostor listener: answers every hello with a challenge whose proof is made up, and
  // accepts whatever proof comes back.
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof(sin);
  REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) == 0);
  REQUIRE(listen(lfd, 4) == 0);
  REQUIRE(getsockname(lfd, reinterpret_cast<sockaddr*>(&sin), &len) == 0);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(sin.sin_port));
  std::thread impostor([lfd] {
    int c = accept(lfd, nullptr, nullptr);
    if (c < 0) return;
    HandshakeFrame hello;
    if (RecvFrame(c, &hello, 5000)) {
      HandshakeFrame challenge = Frame(handshake::Step::kChallenge, hello.comm_id, 1, 0);
      std::memset(challenge.proof, 0x5a, handshake::kAuthBytes);
      HandshakeFrame proof;
      if (SendFrame(c, challenge) && RecvFrame(c, &proof, 5000)) {
        SendFrame(c, Frame(handshake::Step::kAccept, hello.comm_id, 1, 0));
      }
    }
    ClosedByPeer(c, 5000);
    close(c);
  });
  auto member = SecretTransport(0, 2, 0xD00D, "the secret");
  REQUIRE(member);
  auto c = member->Connect(1, address, Deadline::AfterMs(kTestTimeoutMs));
  impostor.join();
  close(lfd);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kRemoteError);
  CHECK_THAT(c.status().message(), Catch::Contains("could not prove"));
}

}  // namespace
}  // namespace braid::transport::tcp
