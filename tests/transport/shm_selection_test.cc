// The registry picks shm for ranks on one host (same host name, boot id and network namespace)
// and TCP otherwise, and BRAID_TRANSPORTS=^shm turns shm off: the same choice
// Communicator::GetConnection makes (first transport whose CanConnect says yes, in priority
// order).
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/registry.h"

namespace braid::transport {
namespace {

TransportContext Context(int rank, const std::string& spec) {
  TransportContext context;
  context.rank = rank;
  context.size = 2;
  context.comm_id = 4242;
  context.config.socket_ifname = "lo";
  context.config.transports = spec;
  return context;
}

PeerInfo Peer(int rank, const std::string& host, const std::string& boot_id,
              const std::string& net_ns = "net:[4026531840]") {
  PeerInfo info;
  info.rank = rank;
  info.host = host;
  info.boot_id = boot_id;
  info.net_ns = net_ns;
  return info;
}

// Name of the first transport that can link `self` and `peer`, as the communicator picks it.
std::string Pick(const std::vector<std::unique_ptr<Transport>>& transports, const PeerInfo& self,
                 const PeerInfo& peer) {
  for (const auto& t : transports) {
    if (t->CanConnect(self, peer)) return t->name();
  }
  return "none";
}

TEST_CASE("shm is picked for ranks on one host, tcp otherwise", "[shm][registry]") {
  const PeerInfo a = Peer(0, "node1", "boot-1");
  const PeerInfo same = Peer(1, "node1", "boot-1");
  const PeerInfo rebooted = Peer(1, "node1", "boot-2");  // same name, another boot: not shared
  const PeerInfo other = Peer(1, "node2", "boot-1");
  // One kernel, another network namespace (a container, a tests/multihost host): its abstract
  // Unix sockets are out of reach, so not the same host.
  const PeerInfo other_ns = Peer(1, "node1", "boot-1", "net:[4026532177]");
  const PeerInfo unknown = Peer(1, "", "");

  auto all = CreateTransports(Context(0, ""));
  REQUIRE(all.ok());
  REQUIRE(all.value().size() == 2);
  CHECK(std::string(all.value()[0]->name()) == "shm");
  CHECK(std::string(all.value()[1]->name()) == "tcp");
  CHECK(Pick(all.value(), a, same) == "shm");
  CHECK(Pick(all.value(), same, a) == "shm");  // both sides agree
  CHECK(Pick(all.value(), a, rebooted) == "tcp");
  CHECK(Pick(all.value(), a, other) == "tcp");
  CHECK(Pick(all.value(), a, other_ns) == "tcp");
  CHECK(Pick(all.value(), other_ns, a) == "tcp");
  CHECK(Pick(all.value(), unknown, unknown) == "tcp");

  auto no_shm = CreateTransports(Context(0, "^shm"));
  REQUIRE(no_shm.ok());
  CHECK(Pick(no_shm.value(), a, same) == "tcp");
  auto only_shm = CreateTransports(Context(0, "shm"));
  REQUIRE(only_shm.ok());
  CHECK(Pick(only_shm.value(), a, other) == "none");
}

TEST_CASE("two ranks on this host connect over the transport they pick", "[shm][registry]") {
  for (const char* spec : {"", "^shm"}) {
    INFO("BRAID_TRANSPORTS='" << spec << "'");
    std::vector<std::vector<std::unique_ptr<Transport>>> ranks;
    for (int r = 0; r < 2; ++r) {
      auto created = CreateTransports(Context(r, spec));
      REQUIRE(created.ok());
      ranks.push_back(std::move(created).value());
    }
    const PeerInfo self[2] = {Peer(0, "thishost", "b"), Peer(1, "thishost", "b")};
    std::string picked[2];
    std::unique_ptr<Connection> conns[2];
    std::string errors[2];
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        const int p = 1 - r;
        for (size_t i = 0; i < ranks[r].size(); ++i) {
          if (!ranks[r][i]->CanConnect(self[r], self[p])) continue;
          picked[r] = ranks[r][i]->name();
          auto c = ranks[r][i]->Connect(p, ranks[p][i]->LocalAddress(), Deadline::AfterMs(20000));
          if (c.ok()) {
            conns[r] = std::move(c).value();
          } else {
            errors[r] = c.status().ToString();
          }
          return;
        }
      });
    }
    for (auto& t : threads) t.join();
    const std::string want = std::string(spec).empty() ? "shm" : "tcp";
    CHECK(picked[0] == want);
    CHECK(picked[1] == want);
    REQUIRE(errors[0] == "");
    REQUIRE(errors[1] == "");
    uint64_t out = 0x1234567890ull, in = 0;
    RequestPtr recv = conns[1]->PostRecv(&in, sizeof(in), 7);
    RequestPtr send = conns[0]->PostSend(&out, sizeof(out), 7);
    CHECK(recv->Wait(Deadline::AfterMs(20000)).ok());
    CHECK(send->Wait(Deadline::AfterMs(20000)).ok());
    CHECK(in == out);
  }
}

}  // namespace
}  // namespace braid::transport
