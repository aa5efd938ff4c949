// Multi-rank tests of the shm transport with ranks as threads of this process (large messages
// then travel by memcpy from the sender's buffer, or through the ring when cross-memory copies
// are switched off). The same contract as TCP's tests: contents, order, mismatches, strangers,
// abort, peer loss; plus what only shm has: ring back-pressure, doorbells, futex sleepers,
// oversubscription.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/transport/shm_test_util.h"
#include "transport/shm/segment.h"
#include "transport/shm/wire.h"

namespace braid::transport::shm {
namespace {

using namespace testing;  // NOLINT

ShmOptions Path(bool cross_memory) {
  ShmOptions options;
  options.cross_memory = cross_memory;
  return options;
}

// Every rank sends every size to every other rank and receives likewise, all posted before any
// wait; returns per-rank errors.
std::vector<std::string> ExchangeAll(Mesh& mesh, const std::vector<size_t>& sizes) {
  const int size = static_cast<int>(mesh.transports.size());
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
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
      for (size_t i = 0; i < recvs.size(); ++i) {
        Status st = recvs[i].second->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok()) {
          if (errors[r].empty()) errors[r] = "recv: " + st.ToString();
          continue;
        }
        std::string bad = CheckPattern(recv_bufs[i], recvs[i].first, r);
        if (!bad.empty() && errors[r].empty()) errors[r] = bad;
      }
      for (auto& s : sends) {
        Status st = s->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok() && errors[r].empty()) errors[r] = "send: " + st.ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST_CASE("shm: sends that finish on the spot share one uncounted, finished request",
          "[shm]") {
  Mesh mesh = MakeMesh(3, 81);
  REQUIRE(mesh.error.empty());
  const float out[2] = {1.5f, -2.0f};
  float in[2] = {0, 0};
  // Two channels, one message each: both sends fit the ring and complete at once.
  RequestPtr first = mesh.conns[0][1]->PostSend(out, sizeof(out), 7);
  RequestPtr second = mesh.conns[0][2]->PostSend(out, sizeof(out), 7);
  CHECK(first->IsDone());
  CHECK(first->status().ok());
  CHECK(first.get() == second.get());
  // Owns nothing: copying and dropping it count no references (and it outlives any channel).
  CHECK(first.use_count() == 0);
  {
    RequestPtr copy = first;
    CHECK(copy.use_count() == 0);
  }
  // The messages themselves still arrive.
  for (int peer : {1, 2}) {
    CAPTURE(peer);
    in[0] = in[1] = 0;
    RequestPtr recv = mesh.conns[peer][0]->PostRecv(in, sizeof(in), 7);
    REQUIRE(recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
    CHECK(in[0] == 1.5f);
    CHECK(in[1] == -2.0f);
  }
  // A failed send does not get the shared request.
  mesh.conns[0][1]->Close(Status::Aborted("closed by the test"));
  RequestPtr failed = mesh.conns[0][1]->PostSend(out, sizeof(out), 8);
  CHECK(failed->IsDone());
  CHECK_FALSE(failed->status().ok());
  CHECK(failed.get() != first.get());
}

TEST_CASE("shm: messages of many sizes arrive intact between every pair", "[shm]") {
  const int size = GENERATE(2, 3);
  const bool cross_memory = GENERATE(true, false);
  INFO(size << " ranks, " << (cross_memory ? "single copy" : "ring only"));
  Mesh mesh = MakeMesh(size, 0x1234 + size, Path(cross_memory));
  REQUIRE(mesh.error.empty());
  const std::vector<size_t> sizes = {
      0, 1, 7, 64, 4095, 4097, (16 << 10) - 1, 16 << 10, 300000, 0, (1 << 20), (16 << 20) + 3};
  std::vector<std::string> errors = ExchangeAll(mesh, sizes);
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

TEST_CASE("shm: a message of hundreds of MiB", "[shm]") {
  const bool cross_memory = GENERATE(true, false);
  INFO((cross_memory ? "single copy" : "ring only"));
  Mesh mesh = MakeMesh(2, 0x5151, Path(cross_memory));
  REQUIRE(mesh.error.empty());
  const size_t bytes = (size_t{256} << 20) + 5;
  std::unique_ptr<char[]> source(new char[bytes]);
  std::unique_ptr<char[]> target(new char[bytes]);
  FillPattern(source.get(), bytes, 0, 1);
  std::memset(target.get(), 0, bytes);
  Status send_status;
  std::thread sender([&] {
    RequestPtr send = mesh.conns[0][1]->PostSend(source.get(), bytes, 77);
    send_status = send->Wait(Deadline::AfterMs(kTestTimeoutMs));
  });
  RequestPtr recv = mesh.conns[1][0]->PostRecv(target.get(), bytes, 77);
  Status recv_status = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
  sender.join();
  CHECK(recv_status.ok());
  CHECK(send_status.ok());
  CHECK(CheckPattern(target.get(), bytes, 0, 1) == "");
}

TEST_CASE("shm: many messages keep their order, sent before the receives are posted", "[shm]") {
  const bool cross_memory = GENERATE(true, false);
  INFO((cross_memory ? "single copy" : "ring only"));
  Mesh mesh = MakeMesh(2, 77, Path(cross_memory));
  REQUIRE(mesh.error.empty());
  constexpr int kCount = 3000;
  auto bytes_of = [](int i) {
    return static_cast<size_t>((i * 37) % 300 + (i % 100 == 0) * 200000);
  };

  std::vector<std::vector<uint8_t>> send_bufs(kCount);
  std::vector<RequestPtr> sends;
  for (int i = 0; i < kCount; ++i) {
    send_bufs[i] = Pattern(bytes_of(i), 0, i % 200);
    sends.push_back(mesh.conns[0][1]->PostSend(send_bufs[i].data(), send_bufs[i].size(), i));
  }
  // The ring fills up before anything is received; the rest waits in rank 0's queue and is pushed
  // by rank 0's control thread when rank 1 rings the doorbell (rank 0 never waits here).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));

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

TEST_CASE("shm: streams of equal messages wrap the ring many times", "[shm]") {
  // Every size meets the ring's end at a different offset: pads, pieces and a full ring with a
  // stale view of the consumer's tail all happen here.
  const size_t bytes = GENERATE(size_t{0}, size_t{24}, size_t{100}, size_t{4000}, size_t{4096},
                                size_t{70000}, size_t{300000});
  const bool cross_memory = GENERATE(true, false);
  INFO(bytes << " bytes, " << (cross_memory ? "single copy" : "ring only"));
  ShmOptions options = Path(cross_memory);
  options.ring_bytes = 64 << 10;  // the smallest ring: it wraps every few messages
  Mesh mesh = MakeMesh(2, 0x5700 + bytes, options);
  REQUIRE(mesh.error.empty());
  const int count = static_cast<int>(std::min<size_t>(3000, (size_t{64} << 20) / (bytes + 64)));
  std::string send_error;
  std::thread sender([&] {
    // Two buffers in turn: one is never rewritten while a send from it may be pending.
    std::vector<uint8_t> data[2] = {std::vector<uint8_t>(bytes + 8),
                                    std::vector<uint8_t>(bytes + 8)};
    std::vector<RequestPtr> window;
    for (int i = 0; i < count; ++i) {
      uint64_t word = 0x1000 + i;
      std::memcpy(data[i % 2].data(), &word, std::min<size_t>(8, bytes));
      window.push_back(mesh.conns[0][1]->PostSend(data[i % 2].data(), bytes, i));
      if (window.size() == 2) {
        Status st = window.front()->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok()) {
          send_error = st.ToString();
          return;
        }
        window.erase(window.begin());
      }
    }
    for (auto& r : window) {
      Status st = r->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) send_error = st.ToString();
    }
  });
  std::string error;
  std::vector<uint8_t> buf(bytes + 8);
  for (int i = 0; i < count && error.empty(); ++i) {
    Status st =
        mesh.conns[1][0]->PostRecv(buf.data(), bytes, i)->Wait(Deadline::AfterMs(kTestTimeoutMs));
    uint64_t word = 0, want = 0x1000 + i;
    std::memcpy(&word, buf.data(), std::min<size_t>(8, bytes));
    if (!st.ok()) {
      error = "recv " + std::to_string(i) + ": " + st.ToString();
    } else if (bytes >= 8 && word != want) {
      error = "message " + std::to_string(i) + " carries " + std::to_string(word - 0x1000);
    }
  }
  sender.join();
  CHECK(error == "");
  CHECK(send_error == "");
}

TEST_CASE("shm: tag and size mismatches fail the receive and name both sides", "[shm]") {
  // 1000 bytes travel inline; 100000 bytes by reference (or in ring pieces).
  const size_t bytes = GENERATE(size_t{1000}, size_t{100000});
  const bool cross_memory = GENERATE(true, false);
  INFO(bytes << " bytes, " << (cross_memory ? "single copy" : "ring only"));
  Mesh mesh = MakeMesh(2, 99, Path(cross_memory));
  REQUIRE(mesh.error.empty());
  Connection& sender = *mesh.conns[0][1];
  Connection& receiver = *mesh.conns[1][0];
  std::vector<uint8_t> data = Pattern(bytes, 0, 1);
  std::vector<uint8_t> buf(bytes);

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
    RequestPtr recv = receiver.PostRecv(buf.data(), bytes - 1, 5);
    Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
    CHECK(st.code() == Code::kInternalError);
    CHECK_THAT(st.message(), Catch::Contains(std::to_string(bytes - 1) + " bytes"));
    CHECK_THAT(st.message(), Catch::Contains(std::to_string(bytes) + " bytes"));
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

TEST_CASE("shm: posting and waiting from several threads at once", "[shm]") {
  const bool cross_memory = GENERATE(true, false);
  INFO((cross_memory ? "single copy" : "ring only"));
  Mesh mesh = MakeMesh(2, 31, Path(cross_memory));
  REQUIRE(mesh.error.empty());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 300;
  // Every message has the same tag and size (their interleaving is up to the scheduler) and
  // carries (thread, index), so the receiver can check each thread's order.
  const size_t bytes = GENERATE(size_t{16}, size_t{40000});
  struct Stamp {
    uint32_t thread;
    uint32_t index;
  };
  std::vector<std::string> errors(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<uint8_t>> bufs(kPerThread, std::vector<uint8_t>(bytes));
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kPerThread; ++i) {
        Stamp s{static_cast<uint32_t>(t), static_cast<uint32_t>(i)};
        std::memcpy(bufs[i].data(), &s, sizeof(s));
        sends.push_back(mesh.conns[0][1]->PostSend(bufs[i].data(), bytes, 1));
      }
      for (auto& s : sends) {
        Status st = s->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok() && errors[t].empty()) errors[t] = st.ToString();
      }
    });
  }
  // Two receiving threads post in turn (a mutex keeps each post-and-record atomic) and wait
  // concurrently.
  std::mutex order_mutex;
  std::vector<std::pair<std::unique_ptr<std::vector<uint8_t>>, RequestPtr>> received;
  received.reserve(kThreads * kPerThread);
  std::vector<std::thread> receivers;
  for (int k = 0; k < 2; ++k) {
    receivers.emplace_back([&] {
      for (int i = 0; i < kThreads * kPerThread / 2; ++i) {
        RequestPtr request;
        {
          std::lock_guard<std::mutex> lock(order_mutex);
          auto buf = std::make_unique<std::vector<uint8_t>>(bytes);
          request = mesh.conns[1][0]->PostRecv(buf->data(), bytes, 1);
          received.emplace_back(std::move(buf), request);
        }
        Status st = request->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(order_mutex);
          if (errors[kThreads].empty()) errors[kThreads] = st.ToString();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& t : receivers) t.join();
  for (int t = 0; t <= kThreads; ++t) CHECK(errors[t] == "");
  std::vector<uint32_t> next(kThreads, 0);
  std::string order_error;
  for (auto& [buf, request] : received) {
    Stamp s;
    std::memcpy(&s, buf->data(), sizeof(s));
    if (s.thread >= kThreads || s.index != next[s.thread]) {
      order_error = "thread " + std::to_string(s.thread) + " message " + std::to_string(s.index) +
                    " arrived out of order";
      break;
    }
    ++next[s.thread];
  }
  CHECK(order_error == "");
}

TEST_CASE("shm: 8 ranks on 2 cores pass messages around a ring without starving", "[shm]") {
  // Oversubscribed: waiters must yield and sleep rather than spin the peers off the cores.
  constexpr int kRanks = 8;
  constexpr int kRounds = 300;
  Mesh mesh;
  {
    std::vector<std::unique_ptr<ShmTransport>> transports;
    for (int r = 0; r < kRanks; ++r) transports.push_back(MakeTransport(r, kRanks, 808));
    mesh.transports = std::move(transports);
  }
  // Ring links only.
  mesh.conns.resize(kRanks);
  for (auto& row : mesh.conns) row.resize(kRanks);
  std::vector<std::string> errors(kRanks);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        for (int p : {(r + 1) % kRanks, (r + kRanks - 1) % kRanks}) {
          auto c = mesh.transports[r]->Connect(p, mesh.transports[p]->LocalAddress(),
                                               Deadline::AfterMs(kTestTimeoutMs));
          if (!c.ok()) {
            errors[r] = c.status().ToString();
            return;
          }
          mesh.conns[r][p] = std::move(c.value());
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < kRanks; ++r) REQUIRE(errors[r] == "");
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Connection& next = *mesh.conns[r][(r + 1) % kRanks];
      Connection& prev = *mesh.conns[r][(r + kRanks - 1) % kRanks];
      std::vector<uint8_t> out(4096), in(4096);
      for (int round = 0; round < kRounds; ++round) {
        FillPattern(out.data(), out.size(), r, round);
        RequestPtr recv = prev.PostRecv(in.data(), in.size(), round);
        RequestPtr send = next.PostSend(out.data(), out.size(), round);
        Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (st.ok()) st = send->Wait(Deadline::AfterMs(kTestTimeoutMs));
        std::string bad = st.ok()
                              ? CheckPattern(in.data(), in.size(), (r + kRanks - 1) % kRanks, round)
                              : st.ToString();
        if (!bad.empty()) {
          errors[r] = "round " + std::to_string(round) + ": " + bad;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < kRanks; ++r) CHECK(errors[r] == "");
  INFO("8-rank ring, " << kRounds << " rounds: " << seconds << " s");
  CHECK(seconds < 10.0);
}

TEST_CASE("shm: a ring of ranks streams large messages through full rings", "[shm]") {
  // Each rank waits on its left neighbour while its own send to the right waits for ring space:
  // the waiter must push the other connection's queued pieces (StalledSends), or every step
  // would wait for the control thread's millisecond backstop.
  constexpr int kRanks = 3;
  constexpr int kSteps = 40;
  constexpr size_t kBytes = 3 << 20;  // three times the ring
  Mesh mesh = MakeMesh(kRanks, 0x3333, Path(false));
  REQUIRE(mesh.error.empty());
  std::vector<std::string> errors(kRanks);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
      std::vector<uint8_t> out = Pattern(kBytes, r, next), in(kBytes);
      for (int step = 0; step < kSteps && errors[r].empty(); ++step) {
        RequestPtr recv = mesh.conns[r][prev]->PostRecv(in.data(), kBytes, step);
        RequestPtr send = mesh.conns[r][next]->PostSend(out.data(), kBytes, step);
        Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (st.ok()) st = send->Wait(Deadline::AfterMs(kTestTimeoutMs));
        if (!st.ok()) errors[r] = "step " + std::to_string(step) + ": " + st.ToString();
      }
      if (errors[r].empty()) errors[r] = CheckPattern(in, prev, r);
    });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < kRanks; ++r) CHECK(errors[r] == "");
  INFO(kRanks << " ranks x " << kSteps << " steps of 3 MiB: " << seconds << " s");
  CHECK(seconds < 15.0);
}

// ---- strangers on the abstract socket ----

int DialRaw(const std::string& name) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True if the other side closes `fd` within `ms` (after at most one refusal frame).
bool ClosedByPeer(int fd, int ms, std::string* reason) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    HandshakeFrame frame;
    ssize_t n = recv(fd, &frame, sizeof(frame), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n == static_cast<ssize_t>(sizeof(frame)) &&
        handshake::IsRefusal(kProtocol, frame.envelope)) {
      *reason = handshake::ReasonOf(frame.envelope);
      continue;
    }
    if (n < 0 && errno != EAGAIN) return errno == ECONNRESET;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

bool SendWithFd(int fd, const HandshakeFrame& frame, int pass) {
  iovec iov{const_cast<HandshakeFrame*>(&frame), sizeof(frame)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &pass, sizeof(int));
  }
  return sendmsg(fd, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(frame));
}

TEST_CASE("shm: strangers are refused and the real peers still connect", "[shm]") {
  std::vector<std::unique_ptr<ShmTransport>> transports;
  transports.push_back(MakeTransport(0, 2, 0xC0FFEE));
  transports.push_back(MakeTransport(1, 2, 0xC0FFEE));
  const std::string listener = transports[1]->LocalAddress();
  CHECK(listener.rfind("braid-shm-c0ffee-r1-", 0) == 0);

  auto hello = [] {
    HandshakeFrame f = Frame(handshake::Step::kHello, 0xC0FFEE, 0, 1);
    f.segment_bytes = Segment::BytesFor(1 << 20);
    f.ring_bytes = 1 << 20;
    return f;
  };
  int memfd = -1;
  Result<Segment> segment = Segment::Create(0xC0FFEE, 0, 1, 1 << 20, &memfd);
  REQUIRE(segment.ok());
  Result<Segment> wrong_segment = Segment::Create(0xBAD, 0, 1, 1 << 20, &memfd);
  int wrong_memfd = memfd;
  memfd = -1;
  REQUIRE(wrong_segment.ok());
  {
    int dummy = -1;
    Result<Segment> again = Segment::Create(0xC0FFEE, 0, 1, 1 << 20, &dummy);
    REQUIRE(again.ok());
    memfd = dummy;
  }

  struct Stranger {
    std::string what;
    int fd;
    bool answered;  // speaks braid: expects a refusal frame with a reason
  };
  std::vector<Stranger> strangers;
  auto add = [&](const std::string& what, bool answered, auto&& send) {
    int fd = DialRaw(listener);
    REQUIRE(fd >= 0);
    CHECK(send(fd));
    strangers.push_back({what, fd, answered});
  };
  add("garbage", false, [](int fd) {
    const char garbage[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxx";
    return send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL) > 0;
  });
  add("bad magic", false, [&](int fd) {
    HandshakeFrame f = hello();
    f.envelope.magic = 0x12345678;
    return SendWithFd(fd, f, memfd);
  });
  add("wrong comm_id", true, [&](int fd) {
    HandshakeFrame f = hello();
    f.envelope.comm_id = 0xBAD;
    return SendWithFd(fd, f, memfd);
  });
  add("wrong version", true, [&](int fd) {
    HandshakeFrame f = hello();
    f.envelope.version = handshake::kVersion + 1;
    return SendWithFd(fd, f, memfd);
  });
  add("wrong receiver", true, [&](int fd) {
    HandshakeFrame f = hello();
    f.envelope.receiver_rank = 7;
    return SendWithFd(fd, f, memfd);
  });
  add("wrong sender", true, [&](int fd) {
    HandshakeFrame f = hello();
    f.envelope.sender_rank = 1;  // a rank does not dial itself, nor do higher ranks dial lower ones
    return SendWithFd(fd, f, memfd);
  });
  add("no segment", true, [&](int fd) { return SendWithFd(fd, hello(), -1); });
  add("segment of another communicator", true,
      [&](int fd) { return SendWithFd(fd, hello(), wrong_memfd); });
  add("segment size lie", true, [&](int fd) {
    HandshakeFrame f = hello();
    f.ring_bytes = 2 << 20;
    f.segment_bytes = Segment::BytesFor(2 << 20);
    return SendWithFd(fd, f, memfd);
  });
  add("truncated hello", false, [](int fd) { return send(fd, "BHSH", 4, MSG_NOSIGNAL) == 4; });
  add("half a handshake, then gone", false, [&](int fd) {
    bool ok = SendWithFd(fd, hello(), memfd);
    shutdown(fd, SHUT_WR);
    return ok;
  });
  // A silent one stays connected (until the handshake timeout) without blocking anyone.
  int silent = DialRaw(listener);
  CHECK(silent >= 0);

  for (auto& s : strangers) {
    INFO(s.what);
    std::string reason;
    if (s.what == "half a handshake, then gone") {
      // Its hello was valid: it got a challenge, then closed. The listener just drops it.
      HandshakeFrame answer;
      CHECK(recv(s.fd, &answer, sizeof(answer), 0) == static_cast<ssize_t>(sizeof(answer)));
      CHECK(answer.envelope.step == static_cast<uint16_t>(handshake::Step::kChallenge));
    } else {
      CHECK(ClosedByPeer(s.fd, 5000, &reason));
      if (s.answered) CHECK_FALSE(reason.empty());
      if (s.what == "garbage" || s.what == "bad magic") CHECK(reason.empty());
      if (s.what == "wrong version") CHECK_THAT(reason, Catch::Contains("handshake version"));
      if (s.what == "wrong comm_id") CHECK_THAT(reason, Catch::Contains("communicator id"));
    }
    close(s.fd);
  }
  close(memfd);
  close(wrong_memfd);

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

TEST_CASE("shm: a connection from another communicator is refused at Connect", "[shm]") {
  auto ours = MakeTransport(1, 2, 1111);
  auto theirs = MakeTransport(0, 2, 2222);
  REQUIRE(ours != nullptr);
  REQUIRE(theirs != nullptr);
  auto c = theirs->Connect(1, ours->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kRemoteError);
  CHECK_THAT(c.status().message(), Catch::Contains("rank 1"));
  CHECK_THAT(c.status().message(), Catch::Contains("refused"));
  CHECK_THAT(c.status().message(), Catch::Contains("communicator id"));
}

TEST_CASE("shm: Abort wakes spinning and sleeping waiters and blocked Connects", "[shm]") {
  Mesh mesh = MakeMesh(2, 5);
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> buf(100), big(1 << 20);
  // One waiter long asleep on the futex, one that starts right before the abort (spinning).
  RequestPtr sleeping = mesh.conns[1][0]->PostRecv(buf.data(), buf.size(), 1);
  RequestPtr second = mesh.conns[1][0]->PostRecv(big.data(), big.size(), 2);
  Status slept, spun;
  std::thread sleeper([&] { slept = sleeping->Wait(Deadline::AfterMs(10 * 60 * 1000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread spinner([&] { spun = second->Wait(Deadline::Never()); });
  auto start = std::chrono::steady_clock::now();
  mesh.transports[1]->Abort(Status::Aborted("test says stop"));
  sleeper.join();
  spinner.join();
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < std::chrono::milliseconds(50));
  CHECK(slept.code() == Code::kAborted);
  CHECK_THAT(slept.message(), Catch::Contains("test says stop"));
  CHECK(spun.code() == Code::kAborted);

  // Later requests and Connects fail at once.
  RequestPtr late = mesh.conns[1][0]->PostSend(buf.data(), buf.size(), 2);
  CHECK(late->Test());
  CHECK(late->status().code() == Code::kAborted);
  auto again = mesh.transports[1]->Connect(0, mesh.transports[0]->LocalAddress(),
                                           Deadline::AfterMs(kTestTimeoutMs));
  CHECK(again.status().code() == Code::kAborted);
  // The peer sees the link drop.
  RequestPtr peer_recv = mesh.conns[0][1]->PostRecv(buf.data(), buf.size(), 3);
  Status peer_status = peer_recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(peer_status.code() == Code::kRemoteError);
  CHECK_THAT(peer_status.message(), Catch::Contains("connection to rank 1 lost"));

  // A Connect waiting for a peer that never dials, and one dialing an address nobody serves.
  auto lonely = MakeTransport(1, 2, 6);
  auto dialer = MakeTransport(0, 2, 6);
  Result<std::unique_ptr<Connection>> accepted = Status::Internal("not run");
  Result<std::unique_ptr<Connection>> dialed = Status::Internal("not run");
  std::thread acceptor(
      [&] { accepted = lonely->Connect(0, "", Deadline::AfterMs(10 * 60 * 1000)); });
  std::thread dialing([&] {
    dialed = dialer->Connect(1, "braid-shm-nobody-here", Deadline::AfterMs(10 * 60 * 1000));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  lonely->Abort(Status::Aborted("give up"));
  dialer->Abort(Status::Aborted("give up too"));
  acceptor.join();
  dialing.join();
  CHECK(accepted.status().code() == Code::kAborted);
  CHECK(dialed.status().code() == Code::kAborted);
}

TEST_CASE("shm: a destroyed peer fails the survivor's pending receive", "[shm]") {
  const bool connection_first = GENERATE(true, false);
  Mesh mesh = MakeMesh(2, 8);
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> buf(1 << 20);
  RequestPtr recv = mesh.conns[0][1]->PostRecv(buf.data(), buf.size(), 3);
  std::vector<uint8_t> junk(1 << 20);
  RequestPtr peer_recv = mesh.conns[1][0]->PostRecv(junk.data(), junk.size(), 4);
  // Rank 0 also has a by-reference send pending that rank 1 never receives.
  RequestPtr pending_send = mesh.conns[0][1]->PostSend(junk.data(), junk.size(), 5);
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
  Status send_st = pending_send->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(send_st.code() == Code::kRemoteError);
  // And every later request on the dead link fails the same way.
  RequestPtr later = mesh.conns[0][1]->PostSend(buf.data(), 10, 9);
  CHECK(later->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kRemoteError);
  RequestPtr later_recv = mesh.conns[0][1]->PostRecv(buf.data(), 10, 9);
  CHECK(later_recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kRemoteError);
}

TEST_CASE("shm: messages sent before the peer closed are still delivered", "[shm]") {
  Mesh mesh = MakeMesh(2, 18);
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> a = Pattern(100, 1, 0), b = Pattern(3000, 1, 0);
  CHECK(mesh.conns[1][0]->PostSend(a.data(), a.size(), 1)->Wait(Deadline::AfterMs(1000)).ok());
  CHECK(mesh.conns[1][0]->PostSend(b.data(), b.size(), 2)->Wait(Deadline::AfterMs(1000)).ok());
  mesh.conns[1][0].reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let rank 0 see the end of file
  std::vector<uint8_t> buf_a(100), buf_b(3000), buf_c(10);
  CHECK(mesh.conns[0][1]->PostRecv(buf_a.data(), 100, 1)->Wait(Deadline::AfterMs(1000)).ok());
  CHECK(mesh.conns[0][1]->PostRecv(buf_b.data(), 3000, 2)->Wait(Deadline::AfterMs(1000)).ok());
  CHECK(CheckPattern(buf_a, 1, 0) == "");
  CHECK(CheckPattern(buf_b, 1, 0) == "");
  Status st = mesh.conns[0][1]->PostRecv(buf_c.data(), 10, 3)->Wait(Deadline::AfterMs(1000));
  CHECK(st.code() == Code::kRemoteError);
  CHECK_THAT(st.message(), Catch::Contains("connection to rank 1 lost"));
}

TEST_CASE("shm: a Wait that times out leaves the request pending", "[shm]") {
  Mesh mesh = MakeMesh(2, 19);
  REQUIRE(mesh.error.empty());
  std::vector<uint8_t> data = Pattern(50000, 0, 1), buf(50000);
  RequestPtr recv = mesh.conns[1][0]->PostRecv(buf.data(), buf.size(), 4);
  auto start = std::chrono::steady_clock::now();
  Status st = recv->Wait(Deadline::AfterMs(30));
  CHECK(st.code() == Code::kTimeout);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
  CHECK_FALSE(recv->Test());
  RequestPtr send = mesh.conns[0][1]->PostSend(data.data(), data.size(), 4);
  CHECK(recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(buf, 0, 1) == "");
}

TEST_CASE("shm: Connect to a peer that never shows times out naming it", "[shm]") {
  auto r0 = MakeTransport(0, 2, 10);
  auto r1 = MakeTransport(1, 2, 10);
  SECTION("accepting side") {
    auto c = r1->Connect(0, r0->LocalAddress(), Deadline::AfterMs(200));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kTimeout);
    CHECK_THAT(c.status().message(), Catch::Contains("rank 1: no shm connection from rank 0"));
  }
  SECTION("dialing side, nobody listening") {
    std::string gone;
    {
      auto other = MakeTransport(1, 2, 11);
      gone = other->LocalAddress();
    }
    auto c = r0->Connect(1, gone, Deadline::AfterMs(200));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kTimeout);
    CHECK_THAT(c.status().message(), Catch::Contains("rank 0: could not connect to rank 1"));
  }
  SECTION("bad arguments") {
    CHECK(r0->Connect(0, r1->LocalAddress(), Deadline::AfterMs(100)).status().code() ==
          Code::kInvalidArgument);
    CHECK(r0->Connect(1, "127.0.0.1:80", Deadline::AfterMs(100)).status().code() ==
          Code::kInvalidArgument);
    CHECK(ShmTransport::Create(Context(2, 2, 1)).status().code() == Code::kInvalidArgument);
    ShmOptions odd;
    odd.ring_bytes = 100000;
    CHECK(ShmTransport::Create(Context(0, 2, 1), odd).status().code() == Code::kInvalidArgument);
    auto single = ShmTransport::Create(Context(0, 1, 1));
    REQUIRE(single.ok());
    CHECK(single.value() == nullptr);  // nobody to reach: the registry skips it
  }
}

TEST_CASE("shm: connections outlive their transport safely", "[shm]") {
  Mesh mesh = MakeMesh(3, 12);
  REQUIRE(mesh.error.empty());
  for (auto& t : mesh.transports) t.reset();
  char byte = 0;
  for (int r = 0; r < 3; ++r) {
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      RequestPtr req = mesh.conns[r][p]->PostRecv(&byte, 1, 0);
      CHECK(req->Test());
      Code code = req->status().code();
      CHECK((code == Code::kAborted || code == Code::kRemoteError));
      mesh.conns[r][p]->Close(Status::Aborted("done"));
    }
  }
  mesh.conns.clear();
}

}  // namespace
}  // namespace braid::transport::shm
