// PeerRecord: what each rank publishes about itself during rendezvous survives the trip through
// the store's text form, and a malformed CPU count is refused instead of misread; HostKey tells
// network namespaces of one kernel apart; BusiestHost reads the peer table into the ranks-per-CPU
// figure the cost model prices the direct allreduce by.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "rendezvous/peer_exchange.h"

using braid::rendezvous::PeerRecord;

TEST_CASE("a peer record round-trips, CPU count included", "[peers]") {
  PeerRecord record;
  record.host = "node7";
  record.boot_id = "1234-abcd";
  record.net_ns = "net:[4026532177]";
  record.cpus = 96;
  record.addresses = {{"shm", "braid-shm-x"}, {"tcp", "10.0.0.7:4242"}};
  auto parsed = PeerRecord::Parse(record.Serialize());
  REQUIRE(parsed.ok());
  CHECK(parsed.value().host == "node7");
  CHECK(parsed.value().boot_id == "1234-abcd");
  CHECK(parsed.value().net_ns == "net:[4026532177]");
  CHECK(parsed.value().cpus == 96);
  REQUIRE(parsed.value().AddressOf("tcp") != nullptr);
  CHECK(*parsed.value().AddressOf("tcp") == "10.0.0.7:4242");
}

TEST_CASE("the local record carries this machine's online CPUs", "[peers]") {
  CHECK(braid::rendezvous::LocalPeerRecord().cpus == sysconf(_SC_NPROCESSORS_ONLN));
}

TEST_CASE("the local record names this process's network namespace", "[peers]") {
  // The reference is the kernel's own answer, read here independently of LocalPeerRecord.
  struct stat ns {};
  REQUIRE(stat("/proc/self/ns/net", &ns) == 0);
  const std::string net_ns = braid::rendezvous::LocalPeerRecord().net_ns;
  CHECK(net_ns == "net:[" + std::to_string(ns.st_ino) + "]");
}

TEST_CASE("a record without a CPU count parses as unknown; a bad one is refused", "[peers]") {
  auto old = PeerRecord::Parse("host=a\nboot_id=b\n");
  REQUIRE(old.ok());
  CHECK(old.value().cpus == 0);
  CHECK(old.value().net_ns.empty());
  for (const char* bad : {"cpus=", "cpus=x", "cpus=-3", "cpus=12abc"}) {
    CAPTURE(bad);
    auto parsed = PeerRecord::Parse(std::string("host=a\n") + bad + "\n");
    CHECK(!parsed.ok());
    CHECK(parsed.status().message().find("malformed peer record") != std::string::npos);
  }
}

namespace {

PeerRecord OnHost(const std::string& host, const std::string& boot_id, int cpus,
                  const std::string& net_ns = "net:[1]") {
  PeerRecord record;
  record.host = host;
  record.boot_id = boot_id;
  record.net_ns = net_ns;
  record.cpus = cpus;
  return record;
}

}  // namespace

TEST_CASE("a host is one kernel and one network namespace", "[peers]") {
  using braid::rendezvous::HostKey;
  const PeerRecord a = OnHost("node", "boot-1", 2, "net:[10]");
  CHECK(HostKey(a) == HostKey(OnHost("node", "boot-1", 2, "net:[10]")));
  CHECK(HostKey(a) != HostKey(OnHost("node", "boot-1", 2, "net:[11]")));  // another namespace
  CHECK(HostKey(a) != HostKey(OnHost("node", "boot-2", 2, "net:[10]")));  // another boot
  CHECK(HostKey(a) != HostKey(OnHost("other", "boot-1", 2, "net:[10]")));
}

TEST_CASE("the busiest host sets how many ranks share a CPU", "[peers]") {
  using braid::rendezvous::BusiestHost;
  SECTION("a core per rank") {
    auto load = BusiestHost({OnHost("a", "1", 2), OnHost("a", "1", 2)});
    CHECK_FALSE(load.oversubscribed);
    CHECK(load.ranks_per_cpu == 1.0);
  }
  SECTION("4 ranks on 2 CPUs") {
    std::vector<PeerRecord> peers(4, OnHost("a", "1", 2));
    auto load = BusiestHost(peers);
    CHECK(load.oversubscribed);
    CHECK(load.ranks_per_cpu == 2.0);
  }
  SECTION("the most crowded of several hosts counts") {
    std::vector<PeerRecord> peers(3, OnHost("a", "1", 2));         // 1.5 per CPU
    for (int i = 0; i < 2; ++i) peers.push_back(OnHost("b", "2", 8));  // 0.25
    auto load = BusiestHost(peers);
    CHECK(load.oversubscribed);
    CHECK(load.ranks_per_cpu == 1.5);
  }
  SECTION("network namespaces of one kernel share its CPUs") {
    std::vector<PeerRecord> peers;
    for (const char* ns : {"net:[1]", "net:[1]", "net:[2]", "net:[2]"}) {
      peers.push_back(OnHost("a", "1", 2, ns));
    }
    auto load = BusiestHost(peers);
    CHECK(load.oversubscribed);
    CHECK(load.ranks_per_cpu == 2.0);
  }
  SECTION("one host name with two boot ids is two machines") {
    std::vector<PeerRecord> peers(2, OnHost("a", "1", 1));
    peers.push_back(OnHost("a", "2", 1));
    auto load = BusiestHost(peers);
    CHECK(load.ranks_per_cpu == 2.0);
  }
  SECTION("an unknown CPU count counts as one CPU") {
    std::vector<PeerRecord> peers(3, OnHost("a", "1", 0));
    auto load = BusiestHost(peers);
    CHECK(load.oversubscribed);
    CHECK(load.ranks_per_cpu == 3.0);
  }
  SECTION("no peers") {
    auto load = BusiestHost({});
    CHECK_FALSE(load.oversubscribed);
    CHECK(load.ranks_per_cpu == 1.0);
  }
}
