// Without the model: the verbs transport over whatever this host has. Where libibverbs or a
// device is absent (every development machine here) it must come up as "not available" -- a
// null transport and an INFO line, never an error or a crash -- and the registry must go on
// with the other transports. Where a device is present it must open it. The expectation comes
// from asking libibverbs directly how many devices it lists.
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "transport/ibverbs/verbs_api.h"
#include "transport/ibverbs/verbs_transport.h"
#include "transport/registry.h"

namespace braid::transport::ibverbs {
namespace {

TransportContext TwoRankContext() {
  TransportContext context;
  context.size = 2;
  context.config.socket_ifname = "lo";
  return context;
}

TEST_CASE("verbs without the model: available exactly where a device is", "[verbs]") {
  REQUIRE_FALSE(UsingVerbsApiForTesting());
  Result<const VerbsApi*> api = ActiveVerbsApi();
  int devices = 0;
  if (!api.ok()) {
    CHECK(api.status().message().find("libibverbs.so.1") != std::string::npos);
  } else {
    ibv_device** list = api.value()->get_device_list(&devices);
    if (list != nullptr) api.value()->free_device_list(list);
  }
  Result<std::unique_ptr<VerbsTransport>> made = VerbsTransport::Create(TwoRankContext());
  REQUIRE(made.ok());
  if (devices == 0) {
    WARN("no RDMA device on this host (" << (api.ok() ? "libibverbs lists none"
                                                      : api.status().message())
                                         << "): the transport must be unavailable");
    CHECK(made.value() == nullptr);
  } else {
    CHECK(made.value() != nullptr);
  }
}

TEST_CASE("verbs without a device: the registry goes on with the other transports", "[verbs]") {
  TransportContext context = TwoRankContext();
  context.config.transports = "ibverbs,tcp";
  Result<std::vector<std::unique_ptr<Transport>>> made = CreateTransports(context);
  REQUIRE(made.ok());
  REQUIRE_FALSE(made.value().empty());
  CHECK(std::string(made.value().back()->name()) == "tcp");
}

}  // namespace
}  // namespace braid::transport::ibverbs
