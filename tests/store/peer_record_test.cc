// PeerRecord: what each rank publishes about itself during rendezvous survives the trip through
// the store's text form, and a malformed CPU count is refused instead of misread.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "rendezvous/peer_exchange.h"

using braid::rendezvous::PeerRecord;

TEST_CASE("a peer record round-trips, CPU count included", "[peers]") {
  PeerRecord record;
  record.host = "node7";
  record.boot_id = "1234-abcd";
  record.cpus = 96;
  record.addresses = {{"shm", "braid-shm-x"}, {"tcp", "10.0.0.7:4242"}};
  auto parsed = PeerRecord::Parse(record.Serialize());
  REQUIRE(parsed.ok());
  CHECK(parsed.value().host == "node7");
  CHECK(parsed.value().boot_id == "1234-abcd");
  CHECK(parsed.value().cpus == 96);
  REQUIRE(parsed.value().AddressOf("tcp") != nullptr);
  CHECK(*parsed.value().AddressOf("tcp") == "10.0.0.7:4242");
}

TEST_CASE("the local record carries this machine's online CPUs", "[peers]") {
  CHECK(braid::rendezvous::LocalPeerRecord().cpus == sysconf(_SC_NPROCESSORS_ONLN));
}

TEST_CASE("a record without a CPU count parses as unknown; a bad one is refused", "[peers]") {
  auto old = PeerRecord::Parse("host=a\nboot_id=b\n");
  REQUIRE(old.ok());
  CHECK(old.value().cpus == 0);
  for (const char* bad : {"cpus=", "cpus=x", "cpus=-3", "cpus=12abc"}) {
    CAPTURE(bad);
    auto parsed = PeerRecord::Parse(std::string("host=a\n") + bad + "\n");
    CHECK(!parsed.ok());
    CHECK(parsed.status().message().find("malformed peer record") != std::string::npos);
  }
}
