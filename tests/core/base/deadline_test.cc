// core/base/deadline.h: never, expired, remaining time and the earlier of two deadlines.
#include "core/base/deadline.h"

#include <catch2/catch.hpp>

namespace braid {

TEST_CASE("deadlines", "[core]") {
  CHECK_FALSE(Deadline::Never().Expired());
  CHECK(Deadline::AfterMs(0).Expired());
  CHECK(Deadline::AfterMs(60000).RemainingMs() > 50000);
  CHECK(Deadline::Never().Min(10).RemainingMs() <= 10);
}

}  // namespace braid
