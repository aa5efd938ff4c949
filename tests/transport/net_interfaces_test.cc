#include "core/base/net_interfaces.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace braid {
namespace {

struct SpecCase {
  const char* spec;
  const char* ifname;
  bool matches;
};

TEST_CASE("MatchesIfnameSpec follows NCCL_SOCKET_IFNAME syntax", "[net_interfaces]") {
  const SpecCase cases[] = {
      // Empty spec or bare '^': no restriction.
      {"", "eth0", true},
      {"^", "eth0", true},
      {"  ", "lo", true},
      // Prefixes.
      {"eth", "eth0", true},
      {"eth", "eth12", true},
      {"eth", "ens3", false},
      {"eth,ib", "ib0", true},
      {"eth,ib", "lo", false},
      {" eth , ib ", "ib1", true},
      {"eth0", "eth0", true},
      {"eth0", "eth01", true},  // still a prefix
      // Exclusion of prefixes.
      {"^docker", "docker0", false},
      {"^docker", "eth0", true},
      {"^docker,lo", "lo", false},
      {"^docker,lo", "eth0", true},
      // Exact names.
      {"=eth0", "eth0", true},
      {"=eth0", "eth01", false},
      {"=eth0,ib0", "ib0", true},
      {"=eth0,ib0", "ib", false},
      // Exact exclusion.
      {"^=eth0", "eth0", false},
      {"^=eth0", "eth01", true},
      {"^=eth0,lo", "lo", false},
      {"^=eth0,lo", "lo0", true},
  };
  for (const SpecCase& c : cases) {
    INFO("spec '" << c.spec << "' ifname '" << c.ifname << "'");
    CHECK(MatchesIfnameSpec(c.spec, c.ifname) == c.matches);
  }
}

Interface Itf(const char* name, int family, const char* address, bool loopback = false) {
  Interface itf;
  itf.name = name;
  itf.family = family;
  itf.address = address;
  itf.loopback = loopback;
  itf.up = true;
  return itf;
}

TEST_CASE("ChooseAddressFrom prefers real interfaces, then virtual, then loopback",
          "[net_interfaces]") {
  Interface lo4 = Itf("lo", AF_INET, "127.0.0.1", true);
  Interface lo6 = Itf("lo", AF_INET6, "::1", true);
  Interface docker = Itf("docker0", AF_INET, "172.17.0.1");
  Interface veth = Itf("veth12ab", AF_INET, "169.254.3.3");
  Interface eth4 = Itf("eth0", AF_INET, "192.0.2.2");
  Interface eth6 = Itf("eth0", AF_INET6, "fd00::2");
  Interface link_local = Itf("eth1", AF_INET6, "fe80::1%eth1");
  link_local.link_local = true;
  Interface down = Itf("eth9", AF_INET, "10.9.9.9");
  down.up = false;

  std::vector<Interface> host = {lo4, docker, veth, eth4, lo6, eth6, link_local, down};
  auto choose = [](const std::vector<Interface>& itfs, const std::string& spec,
                   const std::string& family) {
    Result<std::string> r = ChooseAddressFrom(itfs, spec, family);
    return r.ok() ? r.value() : "error: " + r.status().message();
  };

  CHECK(choose(host, "", "") == "192.0.2.2");
  CHECK(choose(host, "", "AF_INET6") == "fd00::2");
  CHECK(choose(host, "", "AF_INET") == "192.0.2.2");
  CHECK(choose({lo4, docker, veth}, "", "") == "172.17.0.1");
  CHECK(choose({lo4, lo6}, "", "") == "127.0.0.1");
  CHECK(choose({lo4, lo6}, "", "AF_INET6") == "::1");
  CHECK(choose({lo4, link_local}, "", "AF_INET6").rfind("error:", 0) == 0);
  CHECK(choose({lo4, down}, "", "") == "127.0.0.1");
  // With a spec: only matching interfaces, still real before loopback.
  CHECK(choose(host, "lo", "") == "127.0.0.1");
  CHECK(choose(host, "lo", "AF_INET6") == "::1");
  CHECK(choose(host, "docker", "") == "172.17.0.1");
  CHECK(choose(host, "^docker,veth", "") == "192.0.2.2");
  CHECK(choose(host, "^=eth0", "") == "172.17.0.1");
  CHECK(choose(host, "=eth0", "AF_INET6") == "fd00::2");

  Result<std::string> none = ChooseAddressFrom(host, "ib", "");
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == Code::kInvalidArgument);
  CHECK_THAT(none.status().message(), Catch::Contains("'ib'"));
  CHECK_THAT(none.status().message(), Catch::Contains("eth0 192.0.2.2"));
  CHECK_THAT(none.status().message(), Catch::Contains("docker0"));

  Result<std::string> bad_family = ChooseAddressFrom(host, "", "AF_UNIX");
  REQUIRE_FALSE(bad_family.ok());
  CHECK(bad_family.status().code() == Code::kInvalidArgument);
}

TEST_CASE("ListInterfaces sees loopback", "[net_interfaces]") {
  Result<std::vector<Interface>> itfs = ListInterfaces();
  REQUIRE(itfs.ok());
  bool has_lo4 = false;
  for (const Interface& itf : itfs.value()) {
    if (itf.loopback && itf.family == AF_INET && itf.address == "127.0.0.1") has_lo4 = true;
  }
  CHECK(has_lo4);
}

TEST_CASE("ChooseAddress on lo gives 127.0.0.1", "[net_interfaces]") {
  Result<std::string> v4 = ChooseAddress("lo", "AF_INET");
  REQUIRE(v4.ok());
  CHECK(v4.value() == "127.0.0.1");
  Result<std::string> any = ChooseAddress("=lo", "");
  REQUIRE(any.ok());
  CHECK(any.value() == "127.0.0.1");
}

TEST_CASE("ChooseAddress on lo with AF_INET6 gives ::1", "[net_interfaces][ipv6]") {
  Result<std::vector<Interface>> itfs = ListInterfaces();
  REQUIRE(itfs.ok());
  bool has_lo6 = false;
  for (const Interface& itf : itfs.value()) {
    if (itf.loopback && itf.family == AF_INET6 && itf.address == "::1") has_lo6 = true;
  }
  if (!has_lo6) {
    FAIL("no ::1 on this host (IPv6 disabled?): IPv6 address choice cannot be verified");
  }
  Result<std::string> v6 = ChooseAddress("lo", "AF_INET6");
  REQUIRE(v6.ok());
  CHECK(v6.value() == "::1");
}

TEST_CASE("ChooseAddress names an unmatched spec", "[net_interfaces]") {
  Result<std::string> r = ChooseAddress("braid_no_such_if", "");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("braid_no_such_if"));
  CHECK_THAT(r.status().message(), Catch::Contains("lo 127.0.0.1"));
}

}  // namespace
}  // namespace braid
