#include "transport/registry.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace braid::transport {
namespace {

using Names = std::vector<std::string>;

TEST_CASE("registry lists transports in priority order", "[registry]") {
  Names names;
  for (const TransportFactory& f : TransportFactories()) names.push_back(f.name);
  CHECK(names == Names{"shm", "cuda_ipc", "ibverbs", "tcp"});
}

TEST_CASE("SelectTransportNames follows NCCL's include/exclude syntax", "[registry]") {
  struct Case {
    const char* spec;
    Names expected;
  };
  const Case cases[] = {
      {"", {"shm", "cuda_ipc", "ibverbs", "tcp"}},
      {"^", {"shm", "cuda_ipc", "ibverbs", "tcp"}},
      {"tcp", {"tcp"}},
      {"TCP", {"tcp"}},
      {" tcp , shm ", {"shm", "tcp"}},  // priority order, not spec order
      {"tcp,shm,", {"shm", "tcp"}},
      {"^shm", {"cuda_ipc", "ibverbs", "tcp"}},
      {"^shm,cuda_ipc", {"ibverbs", "tcp"}},
  };
  for (const Case& c : cases) {
    INFO("spec '" << c.spec << "'");
    Result<Names> names = SelectTransportNames(c.spec);
    REQUIRE(names.ok());
    CHECK(names.value() == c.expected);
  }

  Result<Names> unknown = SelectTransportNames("tcp,carrier_pigeon");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == Code::kInvalidArgument);
  CHECK_THAT(unknown.status().message(), Catch::Contains("'carrier_pigeon'"));

  Result<Names> unknown_excluded = SelectTransportNames("^nvlink");
  CHECK(unknown_excluded.status().code() == Code::kInvalidArgument);

  Result<Names> none = SelectTransportNames("^cuda_ipc,shm,ibverbs,tcp");
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == Code::kInvalidArgument);
}

TransportContext Context(const std::string& transports) {
  TransportContext context;
  context.rank = 0;
  context.size = 1;
  context.comm_id = 42;
  context.config.socket_ifname = "lo";
  context.config.transports = transports;
  return context;
}

TEST_CASE("CreateTransports honours BRAID_TRANSPORTS", "[registry]") {
  for (const char* spec : {"", "tcp", "^shm", "^ibverbs,cuda_ipc"}) {
    INFO("spec '" << spec << "'");
    auto transports = CreateTransports(Context(spec));
    REQUIRE(transports.ok());
    REQUIRE(transports.value().size() == 1);
    CHECK(std::string(transports.value()[0]->name()) == "tcp");
    CHECK_FALSE(transports.value()[0]->LocalAddress().empty());
  }
  for (const char* spec : {"^tcp", "shm", "bogus"}) {
    INFO("spec '" << spec << "'");
    auto transports = CreateTransports(Context(spec));
    REQUIRE_FALSE(transports.ok());
    CHECK(transports.status().code() == Code::kInvalidArgument);
  }
  auto bad_ifname = Context("tcp");
  bad_ifname.config.socket_ifname = "braid_no_such_if";
  auto failed = CreateTransports(bad_ifname);
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.status().message(), Catch::Contains("tcp transport"));
  CHECK_THAT(failed.status().message(), Catch::Contains("braid_no_such_if"));
}

}  // namespace
}  // namespace braid::transport
