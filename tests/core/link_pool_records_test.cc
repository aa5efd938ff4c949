// LinkPool reads a peer's full record (its addresses) when it first links that peer, once, and
// never the records of peers it does not link: the pools get only the peer table (identities
// without addresses), so a link made at all proves its addresses came from the source.
//
// Four ranks (threads) with real tcp transports on loopback link their ring neighbours only, as a
// communicator does at init; every read of the record source is counted per (reader, peer).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/link_pool.h"
#include "rendezvous/peer_table.h"
#include "transport/registry.h"

namespace braid {
namespace {

constexpr int kRanks = 4;
constexpr int64_t kDeadlineMs = 30000;

TEST_CASE("a peer's record is read when its link is first made, once", "[link_pool]") {
  std::vector<std::vector<std::unique_ptr<transport::Transport>>> transports(kRanks);
  std::vector<rendezvous::PeerRecord> records(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    transport::TransportContext context;
    context.rank = r;
    context.size = kRanks;
    context.comm_id = 0x7ab1e000u + static_cast<uint64_t>(getpid());
    context.secret = "records-test";
    context.config.transports = "tcp";
    context.config.socket_ifname = "lo";
    auto created = transport::CreateTransports(context);
    REQUIRE(created.ok());
    transports[r] = std::move(created).value();
    REQUIRE(transports[r].size() == 1);
    records[r] = rendezvous::LocalPeerRecord();
    records[r].addresses = {{"tcp", transports[r][0]->LocalAddress()}};
  }
  std::vector<rendezvous::PeerRecord> identities;
  for (const auto& record : records) identities.push_back(rendezvous::IdentityOf(record));

  std::atomic<int> reads[kRanks][kRanks] = {};
  std::vector<std::unique_ptr<LinkPool>> pools;
  for (int r = 0; r < kRanks; ++r) {
    PeerRecordSource source = [&, r](int peer, Deadline) -> Result<rendezvous::PeerRecord> {
      ++reads[r][peer];
      return records[static_cast<size_t>(peer)];
    };
    pools.push_back(std::make_unique<LinkPool>(r, identities, std::move(transports[r]), source));
  }

  std::string errors[kRanks];
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      const Deadline deadline = Deadline::AfterMs(kDeadlineMs);
      for (int peer : {(r + 1) % kRanks, (r + kRanks - 1) % kRanks, (r + 1) % kRanks}) {
        auto link = pools[static_cast<size_t>(r)]->Get(peer, deadline);
        if (!link.ok()) {
          errors[r] = link.status().ToString();
          return;
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    REQUIRE(errors[r] == "");
    for (int peer = 0; peer < kRanks; ++peer) {
      CAPTURE(peer);
      const bool neighbour = peer == (r + 1) % kRanks || peer == (r + kRanks - 1) % kRanks;
      CHECK(reads[r][peer] == (neighbour ? 1 : 0));
    }
    CHECK(pools[static_cast<size_t>(r)]->LinkCount() == 2);
  }
}

TEST_CASE("a record that cannot be read fails the link, naming the rank", "[link_pool]") {
  std::vector<rendezvous::PeerRecord> identities(2, rendezvous::LocalPeerRecord());
  transport::TransportContext context;
  context.size = 2;
  context.config.transports = "tcp";
  context.config.socket_ifname = "lo";
  auto created = transport::CreateTransports(context);
  REQUIRE(created.ok());
  LinkPool pool(0, identities, std::move(created).value(),
                [](int peer, Deadline) -> Result<rendezvous::PeerRecord> {
                  return Status::SystemError("store gone while reading rank " +
                                             std::to_string(peer));
                });
  auto link = pool.Get(1, Deadline::AfterMs(1000));
  REQUIRE_FALSE(link.ok());
  CHECK(link.status().code() == Code::kSystemError);
  CHECK(link.status().message().find("rank 0") != std::string::npos);
  CHECK(link.status().message().find("store gone while reading rank 1") != std::string::npos);
  auto ready = pool.GetIfReady(1, Deadline::AfterMs(1000));
  CHECK(ready.status().code() == Code::kSystemError);
}

}  // namespace
}  // namespace braid
