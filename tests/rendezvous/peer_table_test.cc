// The peer table (rendezvous/peer_table.h): its text form round-trips and carries each identity
// once; anything malformed that comes back from the store is refused with a reason instead of
// misread; and the exchange over a real store server names who is missing, who claimed a rank
// twice, and a table that never came.
#include "rendezvous/peer_table.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/deadline.h"
#include "rendezvous/peer_exchange.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"

namespace {

using braid::Code;
using braid::Deadline;
using braid::rendezvous::DecodePeerTable;
using braid::rendezvous::EncodePeerTable;
using braid::rendezvous::IdentityOf;
using braid::rendezvous::PeerRecord;

PeerRecord Record(const std::string& host, int cpus, const std::string& tcp) {
  PeerRecord record;
  record.host = host;
  record.boot_id = "boot-" + host;
  record.cpus = cpus;
  record.addresses = {{"shm", "shm-" + tcp}, {"tcp", tcp}};
  return record;
}

// The fields the table must carry, written out independently of Serialize.
std::string Fields(const PeerRecord& record) {
  std::string out = record.host + "|" + record.boot_id + "|" + std::to_string(record.cpus);
  for (const auto& [name, address] : record.addresses) out += "|" + name + "=" + address;
  return out;
}

struct Server {
  std::unique_ptr<braid::rendezvous::TcpStoreServer> server;
  // A communicator's view of the store; null if it cannot connect (safe from any thread).
  std::shared_ptr<braid::rendezvous::Store> Connect() const {
    auto client = braid::rendezvous::TcpStoreClient::Connect("127.0.0.1", server->port(), "",
                                                             Deadline::AfterMs(10000));
    if (!client.ok()) return nullptr;
    return std::make_shared<braid::rendezvous::PrefixStore>(std::move(client).value(), "comm");
  }
};

Server StartServer() {
  auto server = braid::rendezvous::TcpStoreServer::Start("127.0.0.1", 0, {});
  REQUIRE(server.ok());
  return Server{std::move(server).value()};
}

}  // namespace

TEST_CASE("the identity keeps every field and the transport names, no address", "[peer_table]") {
  const PeerRecord identity = IdentityOf(Record("n1", 4, "10.0.0.1:5"));
  CHECK(Fields(identity) == "n1|boot-n1|4|shm=|tcp=");
}

TEST_CASE("a peer table round-trips and stores each identity once", "[peer_table]") {
  std::vector<PeerRecord> identities;
  for (int r = 0; r < 12; ++r) {
    identities.push_back(IdentityOf(Record("node" + std::to_string(r % 3), 8, "x")));
  }
  const std::string text = EncodePeerTable(identities);
  // Three hosts: each identity's text appears once however many ranks it stands for.
  size_t hosts_written = 0;
  for (size_t at = text.find("host=node"); at != std::string::npos;
       at = text.find("host=node", at + 1)) {
    ++hosts_written;
  }
  CHECK(hosts_written == 3);
  auto decoded = DecodePeerTable(text, 12);
  REQUIRE(decoded.ok());
  REQUIRE(decoded.value().size() == 12);
  CHECK(decoded.value().distinct() == 3);
  const std::vector<PeerRecord> expanded = decoded.value().Expand();
  REQUIRE(expanded.size() == 12);
  for (int r = 0; r < 12; ++r) {
    CHECK(Fields(decoded.value()[r]) ==
          "node" + std::to_string(r % 3) + "|boot-node" + std::to_string(r % 3) + "|8|shm=|tcp=");
    CHECK(Fields(expanded[static_cast<size_t>(r)]) == Fields(decoded.value()[r]));
  }
}

TEST_CASE("a malformed peer table is refused, never misread", "[peer_table]") {
  std::vector<PeerRecord> identities = {IdentityOf(Record("a", 2, "x")),
                                        IdentityOf(Record("b", 2, "y")),
                                        IdentityOf(Record("a", 2, "x"))};
  const std::string text = EncodePeerTable(identities);
  SECTION("cut anywhere") {
    for (size_t n = 0; n < text.size(); ++n) {
      CAPTURE(n);
      auto decoded = DecodePeerTable(text.substr(0, n), 3);
      REQUIRE_FALSE(decoded.ok());
      CHECK(decoded.status().code() == Code::kRemoteError);
    }
  }
  SECTION("another size than the communicator's") {
    CHECK_FALSE(DecodePeerTable(text, 2).ok());
    CHECK_FALSE(DecodePeerTable(text, 4).ok());
  }
  SECTION("an index past the identities") {
    std::string bad = text;
    bad[bad.size() - 2] = '7';  // the last rank's index
    auto decoded = DecodePeerTable(bad, 3);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.status().message().find("rank 2's identity index") != std::string::npos);
  }
  SECTION("trailing bytes, another magic") {
    CHECK_FALSE(DecodePeerTable(text + "0\n", 3).ok());
    CHECK_FALSE(DecodePeerTable("braid-peer-table 2" + text.substr(18), 3).ok());
  }
}

TEST_CASE("ranks that never arrive are named by number", "[peer_table]") {
  Server server = StartServer();
  std::vector<std::string> errors(3);
  std::vector<std::thread> ranks;
  int slot = 0;
  for (int rank : {0, 1, 3}) {  // rank 2 of 4 never comes
    ranks.emplace_back([&, rank, slot] {
      auto store = server.Connect();
      if (store == nullptr) {
        errors[static_cast<size_t>(slot)] = "cannot connect";
        return;
      }
      auto table = braid::rendezvous::ExchangePeerTable(*store, rank, 4, Record("h", 1, "x"),
                                                        Deadline::AfterMs(1500));
      errors[static_cast<size_t>(slot)] = table.ok() ? "" : table.status().ToString();
    });
    ++slot;
  }
  for (auto& t : ranks) t.join();
  for (const std::string& error : errors) {
    CAPTURE(error);
    CHECK(error.find("timed out waiting for 1 of 4 ranks") != std::string::npos);
    CHECK(error.find("missing ranks: 2") != std::string::npos);
  }
}

TEST_CASE("a rank claimed twice and a size that differs are refused", "[peer_table]") {
  Server server = StartServer();
  auto store = server.Connect();
  REQUIRE(store != nullptr);
  const Deadline soon = Deadline::AfterMs(1000);
  auto first = braid::rendezvous::ExchangePeerTable(*store, 0, 2, Record("h", 1, "x"), soon);
  CHECK(first.status().code() == Code::kTimeout);  // rank 1 never came
  auto second = server.Connect();
  REQUIRE(second != nullptr);
  auto again = braid::rendezvous::ExchangePeerTable(*second, 0, 2, Record("h", 1, "x"),
                                                    Deadline::AfterMs(1000));
  REQUIRE(again.status().code() == Code::kInvalidUsage);
  CHECK(again.status().message().find("claimed by more than one caller") != std::string::npos);
  auto other_size = braid::rendezvous::ExchangePeerTable(*second, 1, 3, Record("h", 1, "x"),
                                                         Deadline::AfterMs(1000));
  REQUIRE(other_size.status().code() == Code::kInvalidUsage);
  CHECK(other_size.status().message().find("nranks=3") != std::string::npos);
  CHECK(other_size.status().message().find("registered nranks=2") != std::string::npos);
}

TEST_CASE("a table that never comes although every rank published is said so", "[peer_table]") {
  Server server = StartServer();
  auto store = server.Connect();
  REQUIRE(store != nullptr);
  // Rank 1 published and counted itself, then vanished before it could build the table (it
  // would have been the last to join had rank 0 come first).
  REQUIRE(store->Set("peer/1", Record("h", 1, "y").Serialize(), Deadline::AfterMs(1000)).ok());
  auto table = braid::rendezvous::ExchangePeerTable(*store, 0, 2, Record("h", 1, "x"),
                                                    Deadline::AfterMs(1000));
  REQUIRE(table.status().code() == Code::kTimeout);
  CHECK(table.status().message().find("all 2 ranks published their records") != std::string::npos);
}

TEST_CASE("a peer's full record is read back as it was published", "[peer_table]") {
  Server server = StartServer();
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto store = server.Connect();
      if (store == nullptr) {
        errors[static_cast<size_t>(rank)] = "cannot connect";
        return;
      }
      const Deadline deadline = Deadline::AfterMs(10000);
      auto table = braid::rendezvous::ExchangePeerTable(
          *store, rank, 2, Record("h" + std::to_string(rank), 2, "t" + std::to_string(rank)),
          deadline);
      if (!table.ok()) {
        errors[static_cast<size_t>(rank)] = table.status().ToString();
        return;
      }
      auto peer = braid::rendezvous::FetchPeer(*store, 1 - rank, deadline);
      errors[static_cast<size_t>(rank)] = !peer.ok() ? peer.status().ToString()
                                                     : Fields(peer.value()) + " / " +
                                                           Fields(table.value()[0]) + " / " +
                                                           Fields(table.value()[1]);
    });
  }
  for (auto& t : ranks) t.join();
  const std::string table = " / h0|boot-h0|2|shm=|tcp= / h1|boot-h1|2|shm=|tcp=";
  CHECK(errors[0] == "h1|boot-h1|2|shm=shm-t1|tcp=t1" + table);
  CHECK(errors[1] == "h0|boot-h0|2|shm=shm-t0|tcp=t0" + table);
}
