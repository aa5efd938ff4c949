// Linked into the conformance suite's verbs-model variant: the suite skips a transport that is
// not available on the host, so this case makes sure the ibverbs transport did come up on the
// model there (a broken model would otherwise turn the whole variant into a skip).
#include <catch2/catch.hpp>
#include <memory>

#include "tests/transport/ibverbs/verbs_model.h"
#include "transport/ibverbs/verbs_api.h"
#include "transport/registry.h"

namespace braid::transport {
namespace {

TEST_CASE("conformance over the verbs model: the ibverbs transport is available",
          "[conformance]") {
  REQUIRE(ibverbs::UsingVerbsApiForTesting());
  for (const TransportFactory& factory : TransportFactories()) {
    if (std::string(factory.name) != "ibverbs") continue;
    REQUIRE(factory.create != nullptr);
    TransportContext context;
    context.size = 2;
    context.config.socket_ifname = "lo";
    Result<std::unique_ptr<Transport>> made = factory.create(context);
    REQUIRE(made.ok());
    CHECK(made.value() != nullptr);
    return;
  }
  FAIL("the registry has no ibverbs transport");
}

}  // namespace
}  // namespace braid::transport
