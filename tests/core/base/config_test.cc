// core/base/config.h: integer settings read from the environment are validated.
#include "core/base/config.h"

#include <catch2/catch.hpp>

#include <cstdlib>

namespace braid {

TEST_CASE("integer settings from the environment are validated", "[core]") {
  setenv("BRAID_TEST_INT", "1500", 1);
  CHECK(IntFromEnvironment("BRAID_TEST_INT", 7).value() == 1500);
  setenv("BRAID_TEST_INT", "15x", 1);
  auto bad = IntFromEnvironment("BRAID_TEST_INT", 7);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "BRAID_TEST_INT='15x' is not a non-negative integer");
  setenv("BRAID_TEST_INT", "-3", 1);
  CHECK_FALSE(IntFromEnvironment("BRAID_TEST_INT", 7).ok());
  unsetenv("BRAID_TEST_INT");
  CHECK(IntFromEnvironment("BRAID_TEST_INT", 7).value() == 7);
}

}  // namespace braid
