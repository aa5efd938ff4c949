// LinkPool: when the first transport that says it can link a pair finds the peer out of its reach,
// both ranks move on to the next transport, say so at INFO, and the pair ends up linked.
//
// The real case is ranks in two network namespaces of one kernel whose records could not tell
// the namespaces apart: shared memory says yes, but neither rank can reach the other's abstract
// Unix socket. Here two ranks (threads) get real shm and tcp transports and peer records that
// claim one host but publish shm addresses nobody listens at, which is exactly what each rank sees
// of the other across namespaces. The policy cases (a timeout or an abort is not a reason to try
// another transport) use transports that only answer Connect with a given status.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/link_pool.h"
#include "tests/harness/log_capture.h"
#include "transport/registry.h"

namespace braid {
namespace {

constexpr int64_t kDeadlineMs = 30000;

rendezvous::PeerRecord OneHostRecord() {
  rendezvous::PeerRecord record;
  record.host = "thishost";
  record.boot_id = "boot";
  record.net_ns = "net:[1]";
  return record;
}

// Two ranks' pools with real shm and tcp transports on loopback, whose records claim one host but
// publish shm addresses nobody listens at (what each rank sees of the other across namespaces).
std::vector<std::unique_ptr<LinkPool>> PoolsWithUnreachableShm() {
  std::vector<std::vector<std::unique_ptr<transport::Transport>>> transports(2);
  std::vector<rendezvous::PeerRecord> records(2, OneHostRecord());
  static uint64_t made = 0;  // each pair of pools its own communicator id
  ++made;
  for (int r = 0; r < 2; ++r) {
    transport::TransportContext context;
    context.rank = r;
    context.size = 2;
    context.comm_id = (made << 40) + 0x5eed0000u + static_cast<uint64_t>(getpid());
    context.secret = "fallback-test";
    context.config.socket_ifname = "lo";
    auto created = transport::CreateTransports(context);
    REQUIRE(created.ok());
    transports[r] = std::move(created).value();
    REQUIRE(transports[r].size() == 2);
    REQUIRE(std::string(transports[r][0]->name()) == "shm");
    // A well-formed shm address that nobody listens at: what another namespace's address is.
    records[r].addresses = {
        {"shm", "braid-shm-unreachable-" + std::to_string(getpid()) + "-" + std::to_string(r)},
        {"tcp", transports[r][1]->LocalAddress()}};
  }
  // Both sides must agree that shm is the pair's first choice, or the test proves nothing.
  REQUIRE(transports[0][0]->CanConnect(PeerInfoOf(0, records[0]), PeerInfoOf(1, records[1])));

  std::vector<std::unique_ptr<LinkPool>> pools;
  for (int r = 0; r < 2; ++r) {
    pools.push_back(std::make_unique<LinkPool>(r, records, std::move(transports[r])));
  }
  return pools;
}

// One 8-byte message from `from` to `to`, checked.
void ExchangeOneMessage(transport::Connection* from, transport::Connection* to) {
  uint64_t out = 0x0123456789abcdefull, in = 0;
  transport::RequestPtr recv = to->PostRecv(&in, sizeof(in), 3);
  transport::RequestPtr send = from->PostSend(&out, sizeof(out), 3);
  CHECK(recv->Wait(Deadline::AfterMs(kDeadlineMs)).ok());
  CHECK(send->Wait(Deadline::AfterMs(kDeadlineMs)).ok());
  CHECK(in == out);
}

TEST_CASE("an unreachable shm peer is linked over tcp instead", "[link_pool][fallback]") {
  testing::LogCapture log("link_pool_fallback", "INFO");
  std::vector<std::unique_ptr<LinkPool>> pools = PoolsWithUnreachableShm();
  transport::Connection* links[2] = {nullptr, nullptr};
  std::string errors[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto link = pools[r]->Get(1 - r, Deadline::AfterMs(kDeadlineMs));
      if (link.ok()) {
        links[r] = link.value();
      } else {
        errors[r] = link.status().ToString();
      }
    });
  }
  for (auto& t : ranks) t.join();
  REQUIRE(errors[0] == "");
  REQUIRE(errors[1] == "");
  // TCP hands a message over in one piece; shm would land it in place.
  CHECK_FALSE(links[0]->LandsInPlace());
  CHECK_FALSE(links[1]->LandsInPlace());

  ExchangeOneMessage(links[0], links[1]);

  const std::string text = log.Text();
  for (int r = 0; r < 2; ++r) {
    const std::string line = ":" + std::to_string(r) + " braid INFO no shm link to rank " +
                             std::to_string(1 - r) + " (";
    CAPTURE(r, text);
    CHECK(text.find(line) != std::string::npos);
  }
  CHECK(text.find("); trying tcp") != std::string::npos);
  CHECK(text.find("connected to rank 1 over tcp") != std::string::npos);
  CHECK(text.find("connected to rank 0 over tcp") != std::string::npos);
}

// A receive from any rank links with whichever peer dials first, without waiting (GetIfReady):
// rank 1 waits for rank 0's dial, and rank 0, finding shm out of its reach, dials over tcp. Rank
// 1 must find that link on tcp; before, it asked shm alone and never saw it (its receive would
// have waited for its deadline).
TEST_CASE("a receive from any rank finds the peer's link on the next transport",
          "[link_pool][fallback]") {
  testing::LogCapture log("link_pool_fallback", "INFO");
  std::vector<std::unique_ptr<LinkPool>> pools = PoolsWithUnreachableShm();
  transport::Connection* dialed = nullptr;
  std::string dial_error;
  std::thread dialer([&] {
    auto link = pools[0]->Get(1, Deadline::AfterMs(kDeadlineMs));
    if (link.ok()) {
      dialed = link.value();
    } else {
      dial_error = link.status().ToString();
    }
  });
  // Rank 0 spends about a second finding shm unreachable (its dial is refused that long).
  transport::Connection* claimed = nullptr;
  std::string claim_error;
  int polls = 0;
  const Deadline give_up = Deadline::AfterMs(15000);
  while (claimed == nullptr && claim_error.empty() && !give_up.Expired()) {
    auto link = pools[1]->GetIfReady(0, Deadline::AfterMs(kDeadlineMs));
    ++polls;
    if (!link.ok()) {
      claim_error = link.status().ToString();
    } else if (link.value() != nullptr) {
      claimed = link.value();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  dialer.join();
  REQUIRE(dial_error == "");
  REQUIRE(claim_error == "");
  INFO("GetIfReady asked " << polls << " times");
  REQUIRE(claimed != nullptr);
  CHECK_FALSE(claimed->LandsInPlace());  // tcp, not shm
  ExchangeOneMessage(dialed, claimed);
  // Once claimed, the pool's link is the one every later call gets.
  auto again = pools[1]->GetIfReady(0, Deadline::AfterMs(kDeadlineMs));
  REQUIRE(again.ok());
  CHECK(again.value() == claimed);

  const std::string text = log.Text();
  CAPTURE(text);
  CHECK(text.find(":1 braid INFO no shm link from rank 0 (out of its reach); it linked over tcp") !=
        std::string::npos);
  CHECK(text.find("connected to rank 0 over tcp") != std::string::npos);
}

// A transport that can link every pair and answers Connect with `status`, counting the calls.
class AnsweringTransport : public transport::Transport {
 public:
  AnsweringTransport(const char* name, Status status) : name_(name), status_(std::move(status)) {}
  const char* name() const override { return name_; }
  std::string LocalAddress() const override { return std::string(name_) + "-address"; }
  bool CanConnect(const transport::PeerInfo&, const transport::PeerInfo&) const override {
    return true;
  }
  Result<std::unique_ptr<transport::Connection>> Connect(int, const std::string&,
                                                         Deadline) override {
    ++calls;
    return status_;
  }
  void Abort(const Status&) override {}

  std::atomic<int> calls{0};

 private:
  const char* name_;
  Status status_;
};

struct TwoAnswering {
  AnsweringTransport* first = nullptr;
  AnsweringTransport* second = nullptr;
  std::unique_ptr<LinkPool> pool;
};

TwoAnswering PoolOf(Status first, Status second) {
  TwoAnswering made;
  std::vector<std::unique_ptr<transport::Transport>> transports;
  auto a = std::make_unique<AnsweringTransport>("first", std::move(first));
  auto b = std::make_unique<AnsweringTransport>("second", std::move(second));
  made.first = a.get();
  made.second = b.get();
  transports.push_back(std::move(a));
  transports.push_back(std::move(b));
  std::vector<rendezvous::PeerRecord> records(2, OneHostRecord());
  for (auto& record : records) {
    record.addresses = {{"first", "first-address"}, {"second", "second-address"}};
  }
  made.pool = std::make_unique<LinkPool>(0, records, std::move(transports));
  return made;
}

TEST_CASE("only an unreachable peer moves the link to the next transport", "[link_pool][fallback]") {
  SECTION("a timeout ends the attempt") {
    TwoAnswering t = PoolOf(Status::Timeout("no answer in time"), Status::RemoteError("unused"));
    auto link = t.pool->Get(1, Deadline::AfterMs(1000));
    REQUIRE_FALSE(link.ok());
    CHECK(link.status().code() == Code::kTimeout);
    CHECK(link.status().message().find("over first") != std::string::npos);
    CHECK(t.second->calls == 0);
  }
  SECTION("an aborted transport ends the attempt") {
    TwoAnswering t = PoolOf(Status::Aborted("aborted"), Status::RemoteError("unused"));
    auto link = t.pool->Get(1, Deadline::AfterMs(1000));
    REQUIRE_FALSE(link.ok());
    CHECK(link.status().code() == Code::kAborted);
    CHECK(t.second->calls == 0);
  }
  SECTION("unreachable over both: the last transport's error, not 'no transport'") {
    TwoAnswering t = PoolOf(Status::RemoteError("rank 1 is gone (first)"),
                            Status::RemoteError("rank 1 is gone (second)"));
    auto link = t.pool->Get(1, Deadline::AfterMs(1000));
    REQUIRE_FALSE(link.ok());
    CHECK(link.status().code() == Code::kRemoteError);
    CHECK(link.status().message().find("rank 1 is gone (second)") != std::string::npos);
    CHECK(link.status().message().find("connecting to rank 1 over second") != std::string::npos);
    CHECK(t.first->calls == 1);
    CHECK(t.second->calls == 1);
  }
}

}  // namespace
}  // namespace braid
