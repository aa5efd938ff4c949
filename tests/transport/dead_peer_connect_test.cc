// A peer that dies before or during link set-up is named by Connect within seconds, instead of
// after the communicator's timeout (30 minutes by default): its listening socket (TCP port or
// abstract Unix name) lives exactly as long as its process, so a waiting Connect probes it and a
// refused connection means the peer is gone. Checked for TCP and shm, for the rank that dials and
// the rank that accepts (the lower rank of a pair dials), with the peer in a forked process that
// is SIGKILLed. Also checked: probing a live peer is harmless and quiet.
//
// The child only creates its transport, publishes its address through a pipe and sleeps; every
// check runs on the parent's main thread (Catch2 v2 is neither thread- nor fork-safe).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/log_capture.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace braid::transport {
namespace {

constexpr int64_t kConnectDeadlineMs = 60 * 1000;  // far beyond what a detection may take
constexpr auto kNamedWithin = std::chrono::seconds(5);

enum class Kind { kTcp, kShm };

const char* Name(Kind kind) { return kind == Kind::kTcp ? "tcp" : "shm"; }

Result<std::unique_ptr<Transport>> Make(Kind kind, int rank, uint64_t comm_id) {
  TransportContext context;
  context.rank = rank;
  context.size = 2;
  context.comm_id = comm_id;
  context.secret = "dead-peer-test";
  context.config.socket_ifname = "lo";
  if (kind == Kind::kTcp) {
    BRAID_ASSIGN_OR_RETURN(auto t, tcp::TcpTransport::Create(context));
    return std::unique_ptr<Transport>(std::move(t));
  }
  BRAID_ASSIGN_OR_RETURN(auto t, shm::ShmTransport::Create(context));
  if (t == nullptr) return Status::SystemError("shm is not available here (memfd_create)");
  return std::unique_ptr<Transport>(std::move(t));
}

// A peer rank in a forked process: it holds a transport, has published its address, and sleeps
// until it is killed.
struct ChildPeer {
  pid_t pid = -1;
  std::string address;  // "" if the child could not create its transport

  void Kill() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);  // reaped: the kernel has closed every socket it held
    pid = -1;
  }
  ~ChildPeer() { Kill(); }
};

std::unique_ptr<ChildPeer> SpawnPeer(Kind kind, int rank, uint64_t comm_id) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  auto child = std::make_unique<ChildPeer>();
  child->pid = fork();
  REQUIRE(child->pid >= 0);
  if (child->pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that died
    alarm(120);
    auto transport = Make(kind, rank, comm_id);
    if (!transport.ok()) _exit(3);
    std::string line = transport.value()->LocalAddress() + "\n";
    if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(4);
    for (;;) pause();
  }
  close(fds[1]);
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') child->address.push_back(c);
  close(fds[0]);
  return child;
}

TEST_CASE("Connect names a peer killed before or during link set-up within 5 s",
          "[transport][dead_peer]") {
  static uint64_t comm_id = 0xDEAD0000;
  const Kind kind = GENERATE(Kind::kTcp, Kind::kShm);
  const bool we_dial = GENERATE(true, false);
  const bool during = GENERATE(false, true);
  // The lower rank of a pair dials, the higher one accepts.
  const int self = we_dial ? 0 : 1;
  const int peer = 1 - self;
  INFO(Name(kind) << ", this rank " << (we_dial ? "dials" : "accepts") << ", peer killed "
                  << (during ? "during" : "before") << " Connect");
  ++comm_id;

  std::unique_ptr<ChildPeer> child = SpawnPeer(kind, peer, comm_id);
  REQUIRE_FALSE(child->address.empty());
  auto me = Make(kind, self, comm_id);
  REQUIRE(me.ok());

  if (!during) {
    child->Kill();
  } else if (we_dial) {
    // A stopped peer's kernel still takes our connection into its listener's backlog, so the
    // kill lands in the middle of our handshake, which nobody answers.
    REQUIRE(kill(child->pid, SIGSTOP) == 0);
  }
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Connection>> result = Status::Internal("not run");
  std::thread connector([&] {
    result = me.value()->Connect(peer, child->address, Deadline::AfterMs(kConnectDeadlineMs));
  });
  if (during) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    child->Kill();
  }
  connector.join();
  const auto took = std::chrono::steady_clock::now() - start;

  REQUIRE_FALSE(result.ok());
  INFO(result.status().ToString());
  CHECK(result.status().code() == Code::kRemoteError);
  CHECK_THAT(result.status().message(),
             Catch::Contains("rank " + std::to_string(peer) + " is gone"));
  CHECK_THAT(result.status().message(), Catch::StartsWith("rank " + std::to_string(self) + ":"));
  CHECK(took < kNamedWithin);
}

TEST_CASE("probing a live peer is harmless: a late dialer still connects, without warnings",
          "[transport][dead_peer]") {
  const Kind kind = GENERATE(Kind::kTcp, Kind::kShm);
  INFO(Name(kind));
  ::braid::testing::LogCapture log("dead-peer", "TRACE");
  auto zero = Make(kind, 0, 0xA11FE);
  auto one = Make(kind, 1, 0xA11FE);
  REQUIRE(zero.ok());
  REQUIRE(one.ok());
  Result<std::unique_ptr<Connection>> accepted = Status::Internal("not run");
  std::thread acceptor([&] {
    accepted = one.value()->Connect(0, zero.value()->LocalAddress(),
                                    Deadline::AfterMs(kConnectDeadlineMs));
  });
  // Rank 1 probes rank 0's listener every half second meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(1700));
  auto dialed = zero.value()->Connect(1, one.value()->LocalAddress(),
                                      Deadline::AfterMs(kConnectDeadlineMs));
  acceptor.join();
  REQUIRE(dialed.ok());
  REQUIRE(accepted.ok());

  std::vector<uint8_t> out(5000, 0x5A), in(5000, 0);
  RequestPtr recv = accepted.value()->PostRecv(in.data(), in.size(), 1);
  RequestPtr send = dialed.value()->PostSend(out.data(), out.size(), 1);
  CHECK(recv->Wait(Deadline::AfterMs(kConnectDeadlineMs)).ok());
  CHECK(send->Wait(Deadline::AfterMs(kConnectDeadlineMs)).ok());
  CHECK(in == out);

  const std::string text = log.Text();
  // The probes reached rank 0's listener, which dropped them quietly.
  CHECK_THAT(text, Catch::Contains("closed before sending anything"));
  CHECK_THAT(text, !Catch::Contains("braid WARN"));
}

}  // namespace
}  // namespace braid::transport
