// Authentication of the shm transport's handshake: ranks prove to each other that they hold the
// communicator's secret (challenge-response, transport/handshake.h), so a process that only
// learned the abstract socket name -- any local user can list those -- cannot join, an impostor
// listening at a published name is not trusted, and a refusal is logged and bounded in time while
// the listener keeps serving the legitimate peer. Ranks are threads of this process; raw sockets
// play strangers. Catch2 v2 is not thread-safe: helper threads only record what they saw.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/log_capture.h"
#include "tests/transport/shm_test_util.h"
#include "transport/shm/segment.h"
#include "transport/shm/unix_socket.h"
#include "transport/shm/wire.h"

namespace braid::transport::shm {
namespace {

using namespace testing;  // NOLINT

constexpr uint64_t kComm = 0xA17B;
constexpr int64_t kRefusedWithinMs = 5000;

std::unique_ptr<ShmTransport> MakeWithSecret(int rank, int size, uint64_t comm_id,
                                             const std::string& secret) {
  TransportContext context = Context(rank, size, comm_id);
  context.secret = secret;
  Result<std::unique_ptr<ShmTransport>> t = ShmTransport::Create(context);
  if (!t.ok() || t.value() == nullptr) return nullptr;
  return std::move(t.value());
}

// Sends a pattern from rank 0 to rank 1 and back; "" when both arrive intact.
std::string MoveData(Connection& zero_to_one, Connection& one_to_zero) {
  std::vector<uint8_t> out0 = Pattern(70000, 0, 1), out1 = Pattern(300, 1, 0);
  std::vector<uint8_t> in1(out0.size()), in0(out1.size());
  RequestPtr r1 = one_to_zero.PostRecv(in1.data(), in1.size(), 7);
  RequestPtr r0 = zero_to_one.PostRecv(in0.data(), in0.size(), 8);
  RequestPtr s0 = zero_to_one.PostSend(out0.data(), out0.size(), 7);
  RequestPtr s1 = one_to_zero.PostSend(out1.data(), out1.size(), 8);
  for (RequestPtr* r : {&r1, &r0, &s0, &s1}) {
    Status st = (*r)->Wait(Deadline::AfterMs(kTestTimeoutMs));
    if (!st.ok()) return st.ToString();
  }
  std::string bad = CheckPattern(in1, 0, 1);
  return bad.empty() ? CheckPattern(in0, 1, 0) : bad;
}

// Waits up to `ms` for one frame on the non-blocking `fd`. Returns its size, 0 at end of file,
// -1 on error or when nothing came.
ssize_t RecvWithin(int fd, HandshakeFrame* frame, int ms) {
  pollfd pfd{fd, POLLIN, 0};
  if (poll(&pfd, 1, ms) <= 0) {
    errno = EAGAIN;
    return -1;
  }
  int passed = -1;
  bool truncated = false;
  ssize_t n = RecvFrame(fd, frame, sizeof(*frame), &passed, &truncated);
  if (passed >= 0) close(passed);
  return n;
}

// True if the other side closes `fd` within `ms`; the reason of a refusal frame on the way is
// kept in `*reason`.
bool ClosedByPeer(int fd, int ms, std::string* reason) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    HandshakeFrame frame;
    ssize_t n = RecvWithin(fd, &frame, 50);
    if (n == 0) return true;
    if (n < 0 && errno == ECONNRESET) return true;
    if (n == static_cast<ssize_t>(sizeof(frame)) &&
        handshake::IsRefusal(kProtocol, frame.envelope)) {
      *reason = handshake::ReasonOf(frame.envelope);
    }
  }
  return false;
}

HandshakeFrame Frame(handshake::Step step, int sender, int receiver) {
  return testing::Frame(step, kComm, sender, receiver);
}

TEST_CASE("shm auth: ranks holding the same secret connect and move data", "[shm][auth]") {
  for (const std::string& secret : {std::string("s3cret-token"), std::string()}) {
    INFO("secret '" << secret << "'");
    std::vector<std::unique_ptr<ShmTransport>> transports;
    for (int r = 0; r < 3; ++r) transports.push_back(MakeWithSecret(r, 3, kComm, secret));
    Mesh mesh = ConnectMesh(std::move(transports));
    REQUIRE(mesh.error.empty());
    CHECK(MoveData(*mesh.conns[0][1], *mesh.conns[1][0]) == "");
    CHECK(MoveData(*mesh.conns[1][2], *mesh.conns[2][1]) == "");
  }
}

TEST_CASE("shm auth: a rank holding another secret is refused, and the right one still connects",
          "[shm][auth]") {
  ::braid::testing::LogCapture log("shm-auth", "WARN");
  auto listener = MakeWithSecret(1, 2, kComm, "right");
  REQUIRE(listener != nullptr);
  const std::string address = listener->LocalAddress();

  for (const std::string& wrong : {std::string("wrong"), std::string()}) {
    INFO("intruder's secret '" << wrong << "'");
    auto intruder = MakeWithSecret(0, 2, kComm, wrong);
    REQUIRE(intruder != nullptr);
    auto start = std::chrono::steady_clock::now();
    auto refused = intruder->Connect(1, address, Deadline::AfterMs(kTestTimeoutMs));
    auto took = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == Code::kRemoteError);
    CHECK_THAT(refused.status().message(), Catch::Contains("different secrets"));
    CHECK_THAT(refused.status().message(), Catch::Contains("rank 1"));
    CHECK_THAT(refused.status().message(), Catch::Contains(address));
    CHECK(took < std::chrono::milliseconds(kRefusedWithinMs));
  }

  // The listener still serves the rank that holds the secret.
  auto member = MakeWithSecret(0, 2, kComm, "right");
  REQUIRE(member != nullptr);
  Result<std::unique_ptr<Connection>> accepted = Status::Internal("not run");
  std::thread acceptor([&] {
    accepted = listener->Connect(0, member->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs));
  });
  auto dialed = member->Connect(1, address, Deadline::AfterMs(kTestTimeoutMs));
  acceptor.join();
  REQUIRE(dialed.ok());
  REQUIRE(accepted.ok());
  CHECK(MoveData(*dialed.value(), *accepted.value()) == "");

  // Both sides said why, naming the refused party.
  const std::string text = log.Text();
  CHECK_THAT(text, Catch::Contains("refused a connection on @" + address));
  CHECK_THAT(text, Catch::Contains("wrong secret"));
  CHECK_THAT(text, Catch::Contains("shm handshake with rank 1 at @" + address + " failed"));
}

TEST_CASE("shm auth: a listener that cannot prove the secret is not trusted", "[shm][auth]") {
  // An impostor at a (stale or stolen) address of rank 1: it speaks the protocol perfectly but
  // does not hold the secret, so its proof is garbage.
  const std::string address = "braid-shm-impostor-" + std::to_string(getpid());
  Result<int> listen_fd = ListenAbstract(address);
  REQUIRE(listen_fd.ok());
  std::atomic<bool> saw_proof{false};
  std::thread impostor([&] {
    pollfd pfd{listen_fd.value(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(kTestTimeoutMs)) <= 0) return;
    int fd = accept4(listen_fd.value(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    HandshakeFrame hello;
    if (RecvWithin(fd, &hello, 5000) == static_cast<ssize_t>(sizeof(hello))) {
      HandshakeFrame challenge = Frame(handshake::Step::kChallenge, 1, 0);
      std::memset(challenge.envelope.nonce, 0x11, sizeof(challenge.envelope.nonce));
      std::memset(challenge.envelope.proof, 0x22, sizeof(challenge.envelope.proof));
      SendFrame(fd, &challenge, sizeof(challenge));
      HandshakeFrame proof;
      if (RecvWithin(fd, &proof, 5000) == static_cast<ssize_t>(sizeof(proof))) {
        saw_proof = true;
        HandshakeFrame accept = Frame(handshake::Step::kAccept, 1, 0);
        SendFrame(fd, &accept, sizeof(accept));
      }
    }
    // Hold the socket until the dialer has judged us.
    HandshakeFrame ignored;
    (void)RecvWithin(fd, &ignored, 5000);
    close(fd);
  });
  auto dialer = MakeWithSecret(0, 2, kComm, "right");
  REQUIRE(dialer != nullptr);
  auto start = std::chrono::steady_clock::now();
  auto c = dialer->Connect(1, address, Deadline::AfterMs(kTestTimeoutMs));
  auto took = std::chrono::steady_clock::now() - start;
  impostor.join();
  close(listen_fd.value());
  CHECK(saw_proof);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kRemoteError);
  CHECK_THAT(c.status().message(), Catch::Contains("could not prove"));
  CHECK_THAT(c.status().message(), Catch::Contains("rank 1"));
  CHECK(took < std::chrono::milliseconds(kRefusedWithinMs));
}

TEST_CASE("shm auth: raw strangers are refused and the real pair still connects", "[shm][auth]") {
  ::braid::testing::LogCapture log("shm-auth", "WARN");
  auto r0 = MakeWithSecret(0, 2, kComm, "right");
  auto r1 = MakeWithSecret(1, 2, kComm, "right");
  REQUIRE(r0 != nullptr);
  REQUIRE(r1 != nullptr);
  const std::string address = r1->LocalAddress();
  std::string reason;

  SECTION("garbage") {
    int fd = ConnectAbstract(address);
    REQUIRE(fd >= 0);
    const char garbage[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
    CHECK(send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL) == sizeof(garbage));
    CHECK(ClosedByPeer(fd, 5000, &reason));
    close(fd);
    CHECK_THAT(log.Text(), Catch::Contains("refused a connection on @" + address));
  }
  SECTION("a forged handshake: a valid hello, then a proof made without the secret") {
    int memfd = -1;
    Result<Segment> segment = Segment::Create(kComm, 0, 1, 1 << 20, &memfd);
    REQUIRE(segment.ok());
    int fd = ConnectAbstract(address);
    REQUIRE(fd >= 0);
    HandshakeFrame hello = Frame(handshake::Step::kHello, 0, 1);
    hello.segment_bytes = Segment::BytesFor(1 << 20);
    hello.ring_bytes = 1 << 20;
    std::memset(hello.envelope.nonce, 0x33, sizeof(hello.envelope.nonce));
    REQUIRE(SendFrame(fd, &hello, sizeof(hello), memfd));
    close(memfd);
    HandshakeFrame answer;
    REQUIRE(RecvWithin(fd, &answer, 5000) == static_cast<ssize_t>(sizeof(answer)));
    CHECK(answer.envelope.step == static_cast<uint16_t>(handshake::Step::kChallenge));
    // Guess the proof: what a holder of the empty secret would send.
    HandshakeFrame proof = Frame(handshake::Step::kProof, 0, 1);
    handshake::WriteProof(proof.envelope.proof, "", crypto::ProofRole::kClient,
                          handshake::ProofContext(kProtocol, kComm, 0, 1),
                          handshake::FieldBytes(hello.envelope.nonce),
                          handshake::FieldBytes(answer.envelope.nonce));
    REQUIRE(SendFrame(fd, &proof, sizeof(proof)));
    CHECK(ClosedByPeer(fd, 5000, &reason));
    CHECK_THAT(reason, Catch::Contains("wrong secret"));
    close(fd);
    CHECK_THAT(log.Text(), Catch::Contains("wrong secret"));
  }
  SECTION("a forged handshake: the listener's own proof reflected back") {
    int memfd = -1;
    Result<Segment> segment = Segment::Create(kComm, 0, 1, 1 << 20, &memfd);
    REQUIRE(segment.ok());
    int fd = ConnectAbstract(address);
    REQUIRE(fd >= 0);
    HandshakeFrame hello = Frame(handshake::Step::kHello, 0, 1);
    hello.segment_bytes = Segment::BytesFor(1 << 20);
    hello.ring_bytes = 1 << 20;
    REQUIRE(SendFrame(fd, &hello, sizeof(hello), memfd));
    close(memfd);
    HandshakeFrame answer;
    REQUIRE(RecvWithin(fd, &answer, 5000) == static_cast<ssize_t>(sizeof(answer)));
    HandshakeFrame proof = Frame(handshake::Step::kProof, 0, 1);
    std::memcpy(proof.envelope.proof, answer.envelope.proof, sizeof(proof.envelope.proof));
    REQUIRE(SendFrame(fd, &proof, sizeof(proof)));
    CHECK(ClosedByPeer(fd, 5000, &reason));
    CHECK_THAT(reason, Catch::Contains("wrong secret"));
    close(fd);
  }
  SECTION("a proof without a hello first") {
    int fd = ConnectAbstract(address);
    REQUIRE(fd >= 0);
    HandshakeFrame proof = Frame(handshake::Step::kProof, 0, 1);
    REQUIRE(SendFrame(fd, &proof, sizeof(proof)));
    CHECK(ClosedByPeer(fd, 5000, &reason));
    CHECK_THAT(reason, Catch::Contains("unexpected handshake step"));
    close(fd);
  }
  SECTION("a hello of another version is refused naming both versions") {
    int memfd = -1;
    Result<Segment> segment = Segment::Create(kComm, 0, 1, 1 << 20, &memfd);
    REQUIRE(segment.ok());
    int fd = ConnectAbstract(address);
    REQUIRE(fd >= 0);
    HandshakeFrame hello = Frame(handshake::Step::kHello, 0, 1);
    hello.envelope.version = handshake::kVersion - 1;
    hello.segment_bytes = Segment::BytesFor(1 << 20);
    hello.ring_bytes = 1 << 20;
    REQUIRE(SendFrame(fd, &hello, sizeof(hello), memfd));
    close(memfd);
    CHECK(ClosedByPeer(fd, 5000, &reason));
    CHECK_THAT(reason, Catch::Contains("handshake version " +
                                       std::to_string(handshake::kVersion - 1)));
    close(fd);
  }
  SECTION("a hello with a bad magic gets no answer, only the close") {
    int fd = ConnectAbstract(address);
    REQUIRE(fd >= 0);
    HandshakeFrame hello = Frame(handshake::Step::kHello, 0, 1);
    hello.envelope.magic = 0xDEADBEEF;
    REQUIRE(SendFrame(fd, &hello, sizeof(hello)));
    CHECK(ClosedByPeer(fd, 5000, &reason));
    CHECK(reason.empty());
    close(fd);
    CHECK_THAT(log.Text(), Catch::Contains("bad magic 0xdeadbeef"));
  }

  // Whatever the stranger did, the real pair connects and talks.
  Result<std::unique_ptr<Connection>> accepted = Status::Internal("not run");
  std::thread acceptor(
      [&] { accepted = r1->Connect(0, r0->LocalAddress(), Deadline::AfterMs(kTestTimeoutMs)); });
  auto dialed = r0->Connect(1, address, Deadline::AfterMs(kTestTimeoutMs));
  acceptor.join();
  REQUIRE(dialed.ok());
  REQUIRE(accepted.ok());
  CHECK(MoveData(*dialed.value(), *accepted.value()) == "");
}

}  // namespace
}  // namespace braid::transport::shm
