// Multi-process tests of the shm transport: ranks in forked processes, so large messages travel
// through process_vm_readv (or the ring), the segment is shared between two address spaces, and
// a rank can be SIGKILLed. The child runs only its rank and leaves with _exit; everything is
// checked on the parent's main thread (Catch2 v2 is not thread-safe, and not fork-safe either).
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/reduce_sink.h"
#include "tests/transport/shm_test_util.h"

namespace braid::transport::shm {
namespace {

using namespace testing;  // NOLINT

// A forked rank 1. It writes its transport's address into a pipe, then runs `body`, whose return
// value ("" = fine) it reports through a second pipe before _exit.
struct ChildRank {
  pid_t pid = -1;
  int from_child = -1;
  std::string address;

  // What the child reported ("" = success) once it exited; waits for it.
  std::string Finish() {
    std::string report;
    char buf[512];
    ssize_t n;
    while ((n = read(from_child, buf, sizeof(buf))) > 0) report.append(buf, n);
    close(from_child);
    int status = 0;
    waitpid(pid, &status, 0);
    // The first line is the address, read already.
    size_t nl = report.find('\n');
    report = nl == std::string::npos ? report : report.substr(nl + 1);
    if (!WIFEXITED(status)) return "child died: status " + std::to_string(status) + " " + report;
    if (WEXITSTATUS(status) != 0 && report.empty())
      return "child exit code " + std::to_string(WEXITSTATUS(status));
    return report;
  }
};

ChildRank SpawnRank1(uint64_t comm_id, const ShmOptions& options,
                     std::function<std::string(Connection&)> body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  ChildRank child;
  child.pid = fork();
  REQUIRE(child.pid >= 0);
  if (child.pid == 0) {
    close(fds[0]);
    std::string report;
    {
      auto transport = MakeTransport(1, 2, comm_id, options);
      if (transport == nullptr) _exit(3);
      std::string line = transport->LocalAddress() + "\n";
      if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(4);
      auto c = transport->Connect(0, "", Deadline::AfterMs(kTestTimeoutMs));
      report = c.ok() ? body(*c.value()) : "child connect: " + c.status().ToString();
    }
    if (!report.empty()) (void)!write(fds[1], report.data(), report.size());
    _exit(report.empty() ? 0 : 1);
  }
  close(fds[1]);
  child.from_child = fds[0];
  // Read the address line.
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') child.address.push_back(c);
  return child;
}

// Posts every size both ways, waits, checks. Rank r talks to rank 1 - r.
std::string ExchangeSizes(Connection& conn, int rank, const std::vector<size_t>& sizes) {
  const int peer = 1 - rank;
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<RequestPtr> sends, recvs;
  out.reserve(sizes.size());
  in.reserve(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    in.emplace_back(sizes[k], 0xEE);
    recvs.push_back(conn.PostRecv(in.back().data(), sizes[k], k));
    out.push_back(Pattern(sizes[k], rank, peer));
    sends.push_back(conn.PostSend(out.back().data(), sizes[k], k));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    Status st = recvs[k]->Wait(Deadline::AfterMs(kTestTimeoutMs));
    if (!st.ok())
      return "rank " + std::to_string(rank) + " recv " + std::to_string(k) + ": " + st.ToString();
    std::string bad = CheckPattern(in[k], peer, rank);
    if (!bad.empty()) return bad;
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    Status st = sends[k]->Wait(Deadline::AfterMs(kTestTimeoutMs));
    if (!st.ok())
      return "rank " + std::to_string(rank) + " send " + std::to_string(k) + ": " + st.ToString();
  }
  return "";
}

std::vector<std::string> BraidEntriesInDevShm() {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.find("braid") != std::string::npos) found.push_back(name);
  }
  closedir(dir);
  return found;
}

int SegmentMappingsOfThisProcess() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find("memfd:braid-shm") != std::string::npos) ++count;
  }
  return count;
}

TEST_CASE("shm processes: messages of many sizes arrive intact both ways", "[shm][process]") {
  const bool cross_memory = GENERATE(true, false);
  INFO((cross_memory ? "process_vm_readv" : "ring only"));
  ShmOptions options;
  options.cross_memory = cross_memory;
  options.cross_process_copy_bytes = 16 << 10;  // exercise process_vm_readv (off by default)
  const std::vector<size_t> sizes = {0,        1,      8, 4096,          (16 << 10) - 1,
                                     16 << 10, 100000, 0, (4 << 20) + 1, (64 << 20) + 3};
  ChildRank child =
      SpawnRank1(0xA11, options, [&](Connection& conn) { return ExchangeSizes(conn, 1, sizes); });
  auto transport = MakeTransport(0, 2, 0xA11, options);
  REQUIRE(transport != nullptr);
  auto c = transport->Connect(1, child.address, Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE(c.ok());
  std::string mine = ExchangeSizes(*c.value(), 0, sizes);
  std::string theirs = child.Finish();
  CHECK(mine == "");
  CHECK(theirs == "");
  CHECK(SegmentMappingsOfThisProcess() == 1);
  // Our mapping goes with the connection (and the transport's control thread, which lets go of
  // a closed link asynchronously; destroying the transport joins it).
  c.value().reset();
  transport.reset();
  CHECK(SegmentMappingsOfThisProcess() == 0);
  CHECK(BraidEntriesInDevShm().empty());
}

TEST_CASE("shm processes: ReadPeerMemory copies exactly the bytes asked out of the peer's buffer, "
          "fails cleanly on a bad address, and is refused where cross-memory attach is off",
          "[shm][process][peer_read]") {
  const bool cross_memory = GENERATE(true, false);
  INFO((cross_memory ? "process_vm_readv allowed" : "cross-memory attach off"));
  ShmOptions options;
  options.cross_memory = cross_memory;
  constexpr size_t kBytes = (3 << 20) + 5;
  // The owner (rank 1) offers a patterned buffer: its address in one message; it keeps the buffer
  // until rank 0 says it is done (a second message), as the read algorithms do.
  ChildRank child = SpawnRank1(0x9EAD, options, [&](Connection& conn) -> std::string {
    std::vector<uint8_t> buffer = Pattern(kBytes, 1, 0);
    const uint64_t address = reinterpret_cast<uint64_t>(buffer.data());
    Status sent = conn.PostSend(&address, sizeof(address), 1)->Wait(Deadline::AfterMs(kTestTimeoutMs));
    if (!sent.ok()) return "offer: " + sent.ToString();
    uint64_t done = 0;
    Status heard = conn.PostRecv(&done, sizeof(done), 2)->Wait(Deadline::AfterMs(kTestTimeoutMs));
    if (!heard.ok()) return "answer: " + heard.ToString();
    return done == 7 ? "" : "answer " + std::to_string(done);
  });
  auto transport = MakeTransport(0, 2, 0x9EAD, options);
  REQUIRE(transport != nullptr);
  auto c = transport->Connect(1, child.address, Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE(c.ok());
  Connection& conn = *c.value();
  uint64_t address = 0;
  REQUIRE(conn.PostRecv(&address, sizeof(address), 1)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(conn.ReadsPeerMemory() == cross_memory);
  const std::vector<uint8_t> expected = Pattern(kBytes, 1, 0);
  if (cross_memory) {
    // The whole buffer, then a ragged piece from an odd offset; nothing written past it.
    std::vector<uint8_t> whole(kBytes, 0xEE);
    REQUIRE(conn.ReadPeerMemory(address, whole.data(), kBytes).ok());
    CHECK(whole == expected);
    std::vector<uint8_t> piece(1001 + 3, 0xEE);
    REQUIRE(conn.ReadPeerMemory(address + 77777, piece.data(), 1001).ok());
    CHECK(std::equal(piece.begin(), piece.begin() + 1001, expected.begin() + 77777));
    CHECK(piece[1001] == 0xEE);
    CHECK(conn.ReadPeerMemory(address, piece.data(), 0).ok());
    // Past the end of everything the peer has mapped: an error naming the peer, not a crash.
    Status bad = conn.ReadPeerMemory(uint64_t{1} << 46, piece.data(), 64);
    CHECK(bad.code() == Code::kRemoteError);
    CHECK_THAT(bad.message(), Catch::Contains("rank 1"));
    CHECK_THAT(bad.message(), Catch::Contains("cannot be read"));
  } else {
    std::vector<uint8_t> whole(16, 0xEE);
    Status refused = conn.ReadPeerMemory(address, whole.data(), whole.size());
    CHECK(refused.code() == Code::kInvalidUsage);
    CHECK_THAT(refused.message(), Catch::Contains("rank 1"));
    CHECK(whole == std::vector<uint8_t>(16, 0xEE));
  }
  const uint64_t done = 7;
  CHECK(conn.PostSend(&done, sizeof(done), 2)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(child.Finish() == "");
}

// A receive posted while a message sent by reference already waits in the ring does not copy it
// inside PostRecv: the copy is the wait's. A batch posts its receives before its sends, so a copy
// made at post time would hold this rank's own sends back until it finished, and in an exchange
// the two ranks would copy one after the other instead of at once.
TEST_CASE("shm processes: a message sent by reference is copied by the wait, not by PostRecv",
          "[shm][process]") {
  constexpr size_t kBytes = 1 << 20;
  ShmOptions options;
  options.cross_memory = true;
  options.cross_process_copy_bytes = 16 << 10;  // 1 MiB goes by reference
  ChildRank child = SpawnRank1(0xA15, options, [&](Connection& conn) -> std::string {
    std::vector<uint8_t> out = Pattern(kBytes, 1, 0);
    Status sent = conn.PostSend(out.data(), kBytes, 7)->Wait(Deadline::AfterMs(kTestTimeoutMs));
    return sent.ok() ? "" : "child send: " + sent.ToString();
  });
  auto transport = MakeTransport(0, 2, 0xA15, options);
  REQUIRE(transport != nullptr);
  auto c = transport->Connect(1, child.address, Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE(c.ok());
  Connection& conn = *c.value();
  // Until the reference has arrived.
  const Deadline deadline = Deadline::AfterMs(kTestTimeoutMs);
  std::optional<Connection::Incoming> incoming;
  while (!incoming && !deadline.Expired()) {
    auto probed = conn.Probe();
    REQUIRE(probed.ok());
    incoming = probed.value();
  }
  REQUIRE(incoming.has_value());
  CHECK(incoming->bytes == kBytes);
  std::vector<uint8_t> in(kBytes, 0xEE);
  RequestPtr recv = conn.PostRecv(in.data(), kBytes, 7);
  CHECK_FALSE(recv->IsDone());  // nothing copied yet
  CHECK(in[0] == 0xEE);
  Status got = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(got.ok());
  CHECK(CheckPattern(in, 1, 0) == "");
  CHECK(child.Finish() == "");
}

TEST_CASE("shm processes: a SIGKILLed rank fails the survivor and leaves nothing behind",
          "[shm][process]") {
  const bool cross_memory = GENERATE(true, false);
  INFO((cross_memory ? "process_vm_readv" : "ring only"));
  ShmOptions options;
  options.cross_memory = cross_memory;
  options.cross_process_copy_bytes = 16 << 10;  // exercise process_vm_readv (off by default)
  // The child streams 1 MiB messages (by reference, or in ring pieces) until it is killed.
  ChildRank child = SpawnRank1(0xDEAD, options, [](Connection& conn) {
    std::vector<uint8_t> data(1 << 20, 0x5A);
    for (uint64_t i = 0;; ++i) {
      Status st =
          conn.PostSend(data.data(), data.size(), i)->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return st.ToString();
    }
  });
  auto transport = MakeTransport(0, 2, 0xDEAD, options);
  REQUIRE(transport != nullptr);
  auto c = transport->Connect(1, child.address, Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE(c.ok());
  Connection& conn = *c.value();
  std::vector<uint8_t> buf(1 << 20);
  for (uint64_t i = 0; i < 5; ++i) {
    REQUIRE(conn.PostRecv(buf.data(), buf.size(), i)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  }
  // Mid-transfer: the child is copying into the ring or waiting for our copy when it dies.
  RequestPtr pending = conn.PostRecv(buf.data(), buf.size(), 5);
  kill(child.pid, SIGKILL);
  std::string report = child.Finish();
  CHECK_THAT(report, Catch::Contains("child died"));
  // Whatever was complete in the ring may still arrive; then every receive fails, naming rank 1.
  Status st = pending->Wait(Deadline::AfterMs(kTestTimeoutMs));
  for (uint64_t i = 6; st.ok() && i < 20; ++i) {
    st = conn.PostRecv(buf.data(), buf.size(), i)->Wait(Deadline::AfterMs(kTestTimeoutMs));
  }
  CHECK(st.code() == Code::kRemoteError);
  CHECK_THAT(st.message(), Catch::Contains("connection to rank 1 lost"));
  // Sends fail the same way.
  Status send_st = conn.PostSend(buf.data(), 10, 1)->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(send_st.code() == Code::kRemoteError);

  CHECK(BraidEntriesInDevShm().empty());
  // The segment stays mapped while the connection or any of its requests lives.
  pending.reset();
  c.value().reset();
  transport.reset();
  CHECK(SegmentMappingsOfThisProcess() == 0);
  CHECK(BraidEntriesInDevShm().empty());
}

TEST_CASE("shm processes: a rank blocked elsewhere still drains its queued sends",
          "[shm][process]") {
  // Rank 0 posts more than a ring's worth and then blocks on something that is not shm (a pipe
  // read here, a TCP receive in a mixed ring): its control thread must push the rest when the
  // child frees space and rings the doorbell, as TCP's io thread would.
  ShmOptions options;
  options.cross_memory = false;
  constexpr int kCount = 64;
  constexpr size_t kBytes = 200000;  // 64 x 200 KB = 12.8 MB through a 1 MiB ring
  int go[2];
  REQUIRE(pipe(go) == 0);
  ChildRank child = SpawnRank1(0xB0B, options, [&](Connection& conn) -> std::string {
    std::vector<uint8_t> buf(kBytes);
    for (int i = 0; i < kCount; ++i) {
      Status st = conn.PostRecv(buf.data(), kBytes, i)->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return "child recv " + std::to_string(i) + ": " + st.ToString();
      std::string bad = CheckPattern(buf, 0, i);
      if (!bad.empty()) return bad;
    }
    char done = 'x';
    (void)!write(go[1], &done, 1);  // unblocks the parent
    return "";
  });
  auto transport = MakeTransport(0, 2, 0xB0B, options);
  REQUIRE(transport != nullptr);
  auto c = transport->Connect(1, child.address, Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE(c.ok());
  std::vector<std::vector<uint8_t>> data;
  std::vector<RequestPtr> sends;
  for (int i = 0; i < kCount; ++i) {
    data.push_back(Pattern(kBytes, 0, i));
    sends.push_back(c.value()->PostSend(data.back().data(), kBytes, i));
  }
  char done = 0;
  CHECK(read(go[0], &done, 1) == 1);  // blocks without touching the transport
  CHECK(done == 'x');
  CHECK(child.Finish() == "");
  for (auto& s : sends) {
    CHECK(s->Test());
    CHECK(s->status().ok());
  }
  close(go[0]);
  close(go[1]);
}

// ---- reducing as pieces land: the algorithms' ReduceSink over shm's PostRecvInto ----

struct ReduceCase {
  DataType type;
  ReduceOp op;
  bool message_first;
  bool in_place;
  size_t bytes;
};

// The k-th case's message, element i, as a double (exact in every type used).
double MessageValue(const ReduceCase& c, size_t k, size_t i) {
  if (c.op == ReduceOp::kMax) return -0.0;
  return c.type == DataType::kInt8 ? static_cast<double>((i * 7 + k) % 50) - 25.0
                                   : static_cast<double>(i % 1000) - 500.0;
}
// This rank's own operand, element i.
double OwnValue(const ReduceCase& c, size_t i) {
  if (c.op == ReduceOp::kMax) return 0.0;
  return c.type == DataType::kInt8 ? static_cast<double>(i % 11) - 5.0 : (i % 7) * 0.5;
}

std::vector<uint8_t> Fill(const ReduceCase& c, std::function<double(size_t)> value) {
  std::vector<uint8_t> buf(c.bytes);
  const size_t n = c.bytes / DataTypeSize(c.type);
  for (size_t i = 0; i < n; ++i) {
    const double v = value(i);
    if (c.type == DataType::kInt8) {
      buf[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
    } else if (c.type == DataType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(buf.data() + 4 * i, &f, 4);
    } else {
      std::memcpy(buf.data() + 8 * i, &v, 8);
    }
  }
  return buf;
}

double Element(const ReduceCase& c, const std::vector<uint8_t>& buf, size_t i) {
  if (c.type == DataType::kInt8) return static_cast<int8_t>(buf[i]);
  if (c.type == DataType::kFloat32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  double d;
  std::memcpy(&d, buf.data() + 8 * i, 8);
  return d;
}

TEST_CASE("shm processes: a ReduceSink on PostRecvInto combines every piece with the receiver's "
          "data where it landed",
          "[shm][process]") {
  const bool cross_memory = GENERATE(true, false);
  INFO((cross_memory ? "process_vm_readv (through a bounce buffer)" : "ring pieces"));
  ShmOptions options;
  options.cross_memory = cross_memory;
  options.cross_process_copy_bytes = 16 << 10;
  // Several ring pieces (3 MiB through a 1 MiB ring), odd byte counts for 1-byte elements, one
  // element, max over signed zeros, where the operand order shows: max(a, b) of +0 and -0 is b
  // (kernels/cpu/reduce.h), and kAvg, which the sink sums (the algorithm divides once).
  const std::vector<ReduceCase> cases = {
      {DataType::kFloat32, ReduceOp::kSum, false, false, (3 << 20) + 12},
      {DataType::kFloat32, ReduceOp::kSum, true, true, (3 << 20) + 12},
      {DataType::kInt8, ReduceOp::kSum, false, true, (3 << 20) + 3},
      {DataType::kFloat64, ReduceOp::kSum, false, false, 40008},
      {DataType::kFloat32, ReduceOp::kSum, false, false, 4},
      {DataType::kFloat32, ReduceOp::kMax, false, false, 4100},
      {DataType::kFloat32, ReduceOp::kMax, true, false, 4100},
      {DataType::kFloat64, ReduceOp::kAvg, true, true, (2 << 20) + 8},  // kAvg sums (no divide)
  };
  ChildRank child = SpawnRank1(0xADD, options, [&](Connection& conn) -> std::string {
    for (size_t k = 0; k < cases.size(); ++k) {
      std::vector<uint8_t> msg =
          Fill(cases[k], [&](size_t i) { return MessageValue(cases[k], k, i); });
      Status st = conn.PostSend(msg.data(), msg.size(), k)->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return "child send " + std::to_string(k) + ": " + st.ToString();
    }
    return "";
  });
  auto transport = MakeTransport(0, 2, 0xADD, options);
  REQUIRE(transport != nullptr);
  auto c = transport->Connect(1, child.address, Deadline::AfterMs(kTestTimeoutMs));
  REQUIRE(c.ok());
  Connection& conn = *c.value();
  REQUIRE(conn.LandsInPlace());
  for (size_t k = 0; k < cases.size(); ++k) {
    const ReduceCase& rc = cases[k];
    INFO("case " << k << ": " << DataTypeName(rc.type) << " " << ReduceOpName(rc.op) << " "
                 << rc.bytes << " bytes" << (rc.message_first ? ", message first" : "")
                 << (rc.in_place ? ", in place" : ""));
    std::vector<uint8_t> own = Fill(rc, [&](size_t i) { return OwnValue(rc, i); });
    std::vector<uint8_t> out(rc.bytes, 0xEE);
    std::vector<uint8_t>& target = rc.in_place ? own : out;
    auto sink = std::make_shared<algorithms::ReduceSink>(target.data(), own.data(), rc.type, rc.op,
                                                         rc.message_first);
    Status st = conn.PostRecvInto(rc.bytes, k, sink)->Wait(Deadline::AfterMs(kTestTimeoutMs));
    REQUIRE(st.ok());
    const size_t n = rc.bytes / DataTypeSize(rc.type);
    size_t wrong = 0, first_wrong = n;
    for (size_t i = 0; i < n; ++i) {
      const double got = Element(rc, target, i);
      bool ok;
      if (rc.op == ReduceOp::kMax) {
        // own is +0, the message -0: the second operand wins.
        ok = got == 0.0 && std::signbit(got) == !rc.message_first;
      } else {
        ok = got == OwnValue(rc, i) + MessageValue(rc, k, i);
      }
      if (!ok && wrong++ == 0) first_wrong = i;
    }
    INFO("first wrong element " << first_wrong);
    CHECK(wrong == 0);
  }
  CHECK(child.Finish() == "");
}

}  // namespace
}  // namespace braid::transport::shm
