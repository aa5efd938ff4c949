// An unparsable BRAID_TUNE (set to 3 in BUILD; the environment is parsed once per process) is an
// error naming the variable and its allowed values.
#include <catch2/catch.hpp>

#include <string>

#include "core/base/config.h"

namespace braid {

TEST_CASE("BRAID_TUNE outside 0, 1, 2 is an error naming it", "[config]") {
  const Result<Config> config = ConfigFromEnvironment();
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().code() == Code::kInvalidArgument);
  CHECK(config.status().message() == "BRAID_TUNE must be 0, 1 or 2");
}

}  // namespace braid
