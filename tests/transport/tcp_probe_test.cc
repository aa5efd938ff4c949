// TcpChannel::Probe on a byte stream this test writes itself (one end of a socketpair is the
// channel's socket, the test writes the other): a header that arrives in pieces is reported only
// once whole, no payload byte is taken before the receive, a refused message's payload is skipped,
// and a header with a bad magic or an end of file fails the link naming the peer.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/wire.h"
#include "transport/wait_budget.h"

namespace braid::transport::tcp {
namespace {

constexpr int64_t kTimeoutMs = 10000;

// A channel of rank 1 whose peer (rank 0) is the test, writing raw bytes to `writer`.
struct Stream {
  std::shared_ptr<TcpDriver> driver;
  std::shared_ptr<TcpChannel> channel;
  int writer = -1;

  Stream() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) == 0);
    driver = std::make_shared<TcpDriver>(1, WaitBudget::Oversubscribed());
    channel = TcpChannel::Create(fds[0], 1, 0, driver);
    driver->Add(channel);
    writer = fds[1];
  }
  ~Stream() {
    channel->Fail(Status::Aborted("test over"));
    driver->Remove(channel.get());
    if (writer >= 0) ::close(writer);
  }
  void Write(const void* data, size_t bytes) {
    REQUIRE(::send(writer, data, bytes, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes));
  }
};

std::vector<char> HeaderBytes(uint64_t tag, uint64_t bytes, uint32_t magic = kMessageMagic) {
  MessageHeader header;
  header.magic = magic;
  header.tag = tag;
  header.bytes = bytes;
  std::vector<char> out(sizeof(header));
  std::memcpy(out.data(), &header, sizeof(header));
  return out;
}

}  // namespace

TEST_CASE("tcp probe: a header arriving in pieces is reported once whole, and the payload is "
          "left for the receive", "[tcp][probe]") {
  Stream s;
  const size_t payload_bytes = GENERATE(size_t{100}, size_t{40000});  // staged / read direct
  CAPTURE(payload_bytes);
  std::vector<char> header = HeaderBytes(0xC000000000000005ull, payload_bytes);
  std::vector<char> payload(payload_bytes);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 + 3);

  auto probed = s.channel->Probe();
  REQUIRE(probed.ok());
  CHECK_FALSE(probed.value().has_value());
  // 1, then 10, then the rest of the 24 header bytes.
  size_t written = 0;
  for (size_t piece : {size_t{1}, size_t{10}}) {
    s.Write(header.data() + written, piece);
    written += piece;
    probed = s.channel->Probe();
    REQUIRE(probed.ok());
    CHECK_FALSE(probed.value().has_value());
  }
  s.Write(header.data() + written, header.size() - written);
  // The payload's first bytes arrive with the header's last: they must not be taken.
  s.Write(payload.data(), std::min<size_t>(payload.size(), 50));
  probed = s.channel->Probe();
  REQUIRE(probed.ok());
  REQUIRE(probed.value().has_value());
  CHECK(probed.value()->tag == 0xC000000000000005ull);
  CHECK(probed.value()->bytes == payload_bytes);
  char peeked[64];
  CHECK(::recv(s.channel->fd(), peeked, sizeof(peeked), MSG_PEEK | MSG_DONTWAIT) ==
        static_cast<ssize_t>(std::min<size_t>(payload.size(), 50)));

  std::vector<char> got(payload_bytes, 0);
  RequestPtr recv = s.channel->PostRecv(got.data(), got.size(), 0xC000000000000005ull);
  if (payload.size() > 50) s.Write(payload.data() + 50, payload.size() - 50);
  REQUIRE(recv->Wait(Deadline::AfterMs(kTimeoutMs)).ok());
  CHECK(got == payload);
  probed = s.channel->Probe();
  REQUIRE(probed.ok());
  CHECK_FALSE(probed.value().has_value());
}

TEST_CASE("tcp probe: the payload of a refused message is skipped", "[tcp][probe]") {
  Stream s;
  std::vector<char> first = HeaderBytes(1, 30000), payload(30000, 'x');
  s.Write(first.data(), first.size());
  std::vector<char> buf(10);
  RequestPtr refused = s.channel->PostRecv(buf.data(), buf.size(), 1);
  REQUIRE(refused->Test());
  CHECK(refused->status().code() == Code::kInternalError);
  // The refused payload comes after the refusal, in pieces, then the next message.
  std::vector<char> second = HeaderBytes(2, 4);
  s.Write(payload.data(), 20000);
  auto probed = s.channel->Probe();
  REQUIRE(probed.ok());
  CHECK_FALSE(probed.value().has_value());
  s.Write(payload.data(), 10000);
  s.Write(second.data(), second.size());
  s.Write("abcd", 4);
  probed = s.channel->Probe();
  REQUIRE(probed.ok());
  REQUIRE(probed.value().has_value());
  CHECK(probed.value()->tag == 2);
  CHECK(probed.value()->bytes == 4);
  char got[4] = {};
  REQUIRE(s.channel->PostRecv(got, 4, 2)->Wait(Deadline::AfterMs(kTimeoutMs)).ok());
  CHECK(std::string(got, 4) == "abcd");
}

TEST_CASE("tcp probe: a bad magic or an end of file fails the link, naming the peer",
          "[tcp][probe]") {
  Stream s;
  const bool bad_magic = GENERATE(true, false);
  CAPTURE(bad_magic);
  if (bad_magic) {
    std::vector<char> header = HeaderBytes(1, 4, 0x12345678);
    s.Write(header.data(), header.size());
  } else {
    std::vector<char> header = HeaderBytes(1, 4);
    s.Write(header.data(), 10);  // half a header, then the peer leaves
    ::close(s.writer);
    s.writer = -1;
  }
  // The half header may be reported as "nothing yet" once before the end of file is read.
  auto probed = s.channel->Probe();
  for (int i = 0; i < 3 && probed.ok(); ++i) {
    CHECK_FALSE(probed.value().has_value());
    probed = s.channel->Probe();
  }
  CHECK(probed.status().code() == Code::kRemoteError);
  CHECK(probed.status().message().find("rank 0") != std::string::npos);
  // The link is failed for good: later requests fail at once.
  char buf[4];
  RequestPtr later = s.channel->PostRecv(buf, 4, 1);
  REQUIRE(later->Test());
  CHECK(later->status().code() == Code::kRemoteError);
}

}  // namespace braid::transport::tcp
