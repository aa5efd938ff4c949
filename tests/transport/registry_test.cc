#include "transport/registry.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/device/simulated_device.h"
#include "tests/harness/log_capture.h"

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

// Names of the transports made, without ibverbs (present only on hosts with an RDMA port).
Names MadeWithoutVerbs(const std::vector<std::unique_ptr<Transport>>& transports) {
  Names names;
  for (const auto& t : transports) {
    if (std::string(t->name()) != "ibverbs") names.push_back(t->name());
  }
  return names;
}

TEST_CASE("cuda_ipc is made only for a communicator on device buffers, and goes first there", "[registry]") {
  TransportContext host_only = Context("");
  host_only.size = 2;
  {
    braid::testing::LogCapture log("registry_cuda_ipc", "INFO");
    auto transports = CreateTransports(host_only);
    REQUIRE(transports.ok());
    CHECK(MadeWithoutVerbs(transports.value()) == Names{"shm", "tcp"});
    CHECK(log.Text().find("cuda_ipc") == std::string::npos);  // a host-only communicator hears nothing of it
  }
  // The CPU SIMULATION of the device seam stands for a GPU here.
  TransportContext on_device = host_only;
  on_device.device = device::NewSimulatedDevice();
  auto transports = CreateTransports(on_device);
  REQUIRE(transports.ok());
  CHECK(MadeWithoutVerbs(transports.value()) == Names{"cuda_ipc", "shm", "tcp"});
  on_device.config.transports = "^cuda_ipc";
  auto without = CreateTransports(on_device);
  REQUIRE(without.ok());
  CHECK(MadeWithoutVerbs(without.value()) == Names{"shm", "tcp"});
}

}  // namespace
}  // namespace braid::transport
