// Connection::SendRecv on shm connections (ranks as threads of this process): the request-free
// path for messages of up to kWholeMessageBytes (a ring line up to 32 bytes, one record above)
// and every way it hands over to the posted path -- a message that is late, a message bigger
// than kWholeMessageBytes, a zero-byte half, a send queued behind a full ring, a receive already
// posted, a mismatched tag, a closed link. Each checks the bytes that arrive
// against the sender's pattern, and the order of messages on the link.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/transport/shm_test_util.h"
#include "transport/shm/ring.h"
#include "transport/shm/shm_connection.h"

namespace braid::transport::shm {
namespace {

using namespace testing;  // NOLINT
using Half = Connection::Half;

Deadline Soon() { return Deadline::AfterMs(kTestTimeoutMs); }

// Both ranks exchange `bytes` with SendRecv `rounds` times (tag = round); returns each rank's
// first error, empty if every message arrived intact.
std::vector<std::string> PingPong(Mesh& mesh, size_t bytes, int rounds) {
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<uint8_t> out = Pattern(bytes, r, 1 - r), in(bytes);
      for (int i = 0; i < rounds && errors[r].empty(); ++i) {
        std::fill(in.begin(), in.end(), 0xEE);
        Half failed = Half::kSend;
        Status st = mesh.conns[r][1 - r]->SendRecv(out.data(), bytes, in.data(), bytes,
                                                   static_cast<uint64_t>(i), Soon(), &failed);
        if (!st.ok()) errors[r] = "round " + std::to_string(i) + ": " + st.ToString();
        else errors[r] = CheckPattern(in, 1 - r, r);
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST_CASE("shm SendRecv: small and larger exchanges arrive intact, many rounds", "[shm]") {
  const size_t bytes = GENERATE(size_t{1}, size_t{5}, size_t{8}, size_t{17}, kLinePayload,
                                kLinePayload + 1, size_t{256}, kWholeMessageBytes,
                                kWholeMessageBytes + 1, size_t{300000});
  INFO(bytes << " bytes");
  Mesh mesh = MakeMesh(2, 301);
  REQUIRE(mesh.error.empty());
  const std::vector<std::string> errors = PingPong(mesh, bytes, bytes > 4096 ? 20 : 3000);
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
}

TEST_CASE("shm SendRecv: a late peer is waited for, and the link stays in order", "[shm]") {
  Mesh mesh = MakeMesh(2, 302);
  REQUIRE(mesh.error.empty());
  const uint64_t mine = 0x1111, theirs = 0x2222;
  uint64_t got = 0;
  std::thread late([&] {
    // Longer than ReceiveWhole's spin, so rank 0 goes on to the posted receive and its wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    uint64_t back = 0;
    Half failed = Half::kSend;
    CHECK(mesh.conns[1][0]->SendRecv(&theirs, 8, &back, 8, 7, Soon(), &failed).ok());
    CHECK(back == mine);
  });
  Half failed = Half::kSend;
  CHECK(mesh.conns[0][1]->SendRecv(&mine, 8, &got, 8, 7, Soon(), &failed).ok());
  late.join();
  CHECK(got == theirs);
  // The next plain messages still match in posting order.
  const uint64_t again = 0x3333;
  uint64_t received = 0;
  RequestPtr recv = mesh.conns[1][0]->PostRecv(&received, 8, 8);
  RequestPtr send = mesh.conns[0][1]->PostSend(&again, 8, 8);
  CHECK(recv->Wait(Soon()).ok());
  CHECK(send->Wait(Soon()).ok());
  CHECK(received == again);
}

TEST_CASE("shm SendRecv: zero-byte halves send or receive only", "[shm]") {
  Mesh mesh = MakeMesh(2, 303);
  REQUIRE(mesh.error.empty());
  const uint32_t value = 42;
  uint32_t got = 0;
  Half failed = Half::kSend;
  std::thread receiver([&] {
    Half f = Half::kSend;
    CHECK(mesh.conns[1][0]->SendRecv(nullptr, 0, &got, 4, 1, Soon(), &f).ok());
  });
  CHECK(mesh.conns[0][1]->SendRecv(&value, 4, nullptr, 0, 1, Soon(), &failed).ok());
  receiver.join();
  CHECK(got == 42);
}

TEST_CASE("shm SendRecv: a receive posted before it is matched first", "[shm]") {
  Mesh mesh = MakeMesh(2, 304);
  REQUIRE(mesh.error.empty());
  const uint64_t first = 0xA, second = 0xB, reply = 0xC;
  uint64_t posted_into = 0, exchanged_into = 0, reply_got = 0;
  // Rank 1 posts a receive, then exchanges: the first message is the posted receive's.
  RequestPtr posted = mesh.conns[1][0]->PostRecv(&posted_into, 8, 1);
  RequestPtr send_first = mesh.conns[0][1]->PostSend(&first, 8, 1);
  std::thread peer([&] {
    Half f = Half::kSend;
    CHECK(mesh.conns[0][1]->SendRecv(&second, 8, &reply_got, 8, 2, Soon(), &f).ok());
  });
  Half failed = Half::kSend;
  CHECK(mesh.conns[1][0]->SendRecv(&reply, 8, &exchanged_into, 8, 2, Soon(), &failed).ok());
  peer.join();
  CHECK(posted->Wait(Soon()).ok());
  CHECK(send_first->Wait(Soon()).ok());
  CHECK(posted_into == first);
  CHECK(exchanged_into == second);
  CHECK(reply_got == reply);
}

TEST_CASE("shm SendRecv: sends queued behind a full ring leave first", "[shm]") {
  ShmOptions small;
  small.ring_bytes = 64 * 1024;
  small.cross_memory = false;  // large messages through the ring, not by reference
  Mesh mesh = MakeMesh(2, 305, small);
  REQUIRE(mesh.error.empty());
  // More than the ring holds: the tail of this send waits in rank 0's queue.
  std::vector<uint8_t> big = Pattern(256 * 1024, 0, 1), big_in(big.size());
  RequestPtr big_send = mesh.conns[0][1]->PostSend(big.data(), big.size(), 1);
  const uint64_t line = 0x77, back = 0x88;
  uint64_t line_in = 0, back_in = 0;
  std::thread receiver([&] {
    RequestPtr r = mesh.conns[1][0]->PostRecv(big_in.data(), big_in.size(), 1);
    CHECK(r->Wait(Soon()).ok());
    Half f = Half::kSend;
    CHECK(mesh.conns[1][0]->SendRecv(&back, 8, &line_in, 8, 2, Soon(), &f).ok());
  });
  Half failed = Half::kSend;
  CHECK(mesh.conns[0][1]->SendRecv(&line, 8, &back_in, 8, 2, Soon(), &failed).ok());
  CHECK(big_send->Wait(Soon()).ok());
  receiver.join();
  CHECK(CheckPattern(big_in, 0, 1) == "");
  CHECK(line_in == line);
  CHECK(back_in == back);
}

TEST_CASE("shm SendRecv: a mismatched tag fails the receive half, naming both tags", "[shm]") {
  Mesh mesh = MakeMesh(2, 306);
  REQUIRE(mesh.error.empty());
  const uint64_t a = 1, b = 2;
  uint64_t a_in = 0, b_in = 0;
  Status peer_status;
  std::thread peer([&] {
    Half f = Half::kSend;
    peer_status = mesh.conns[1][0]->SendRecv(&b, 8, &b_in, 8, 5, Soon(), &f);
  });
  Half failed = Half::kSend;
  Status st = mesh.conns[0][1]->SendRecv(&a, 8, &a_in, 8, 6, Soon(), &failed);
  peer.join();
  CHECK(st.code() == Code::kInternalError);
  CHECK(failed == Half::kReceive);
  CHECK_THAT(st.message(), Catch::Contains("expected tag 6"));
  CHECK_THAT(st.message(), Catch::Contains("has tag 5"));
  CHECK(peer_status.code() == Code::kInternalError);
}

TEST_CASE("shm SendRecv: a closed link fails the exchange instead of waiting", "[shm]") {
  Mesh mesh = MakeMesh(2, 307);
  REQUIRE(mesh.error.empty());
  mesh.conns[0][1]->Close(Status::Aborted("closed by the test"));
  const uint64_t v = 9;
  uint64_t in = 0;
  Half failed = Half::kSend;
  Status st = mesh.conns[0][1]->SendRecv(&v, 8, &in, 8, 1, Soon(), &failed);
  CHECK(st.code() == Code::kAborted);
  CHECK_THAT(st.message(), Catch::Contains("closed by the test"));
  // The peer sees the link lost, not a hang.
  Status peer = mesh.conns[1][0]->SendRecv(&v, 8, &in, 8, 1, Soon(), &failed);
  CHECK(peer.code() == Code::kRemoteError);
}

}  // namespace
}  // namespace braid::transport::shm
