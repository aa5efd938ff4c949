// Linked into the conformance suite's simulated-device variant: the suite skips a transport that
// is not available on the host, so this case makes sure cuda_ipc did come up on the simulated
// device there (a broken install would otherwise turn the whole variant into a skip).
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "transport/registry.h"

namespace braid::transport {
namespace {

TEST_CASE("conformance on the simulated device: the cuda_ipc transport is available", "[conformance]") {
  for (const TransportFactory& factory : TransportFactories()) {
    if (std::string(factory.name) != "cuda_ipc") continue;
    REQUIRE(factory.create != nullptr);
    TransportContext context;
    context.size = 2;
    Result<std::unique_ptr<Transport>> made = factory.create(context);
    REQUIRE(made.ok());
    REQUIRE(made.value() != nullptr);
    CHECK(std::string(made.value()->name()) == "cuda_ipc");
    return;
  }
  FAIL("the registry has no cuda_ipc transport");
}

}  // namespace
}  // namespace braid::transport
