// core/base/status.h: Status and Result carry a code and a message with context added on the way
// up; copies share the message.
#include "core/base/status.h"

#include <catch2/catch.hpp>

#include <string>
#include <utility>

namespace braid {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  int half = 0;
  BRAID_ASSIGN_OR_RETURN(half, Half(x));
  BRAID_ASSIGN_OR_RETURN(*out, Half(half));
  return Status::Ok();
}

}  // namespace

TEST_CASE("Status and Result carry codes and context", "[core]") {
  int out = 0;
  CHECK(Quarter(8, &out).ok());
  CHECK(out == 2);
  Status odd = Quarter(6, &out);
  CHECK(odd.code() == Code::kInvalidArgument);
  CHECK(odd.message() == "3 is odd");
  Status wrapped = odd.WithContext("rank 2");
  CHECK(wrapped.message() == "rank 2: 3 is odd");
  CHECK(wrapped.ToString() == "invalid argument: rank 2: 3 is odd");
  CHECK(Status::Ok().WithContext("ignored").ok());
  // A Result made from an OK status is an internal error, never a value-less success.
  Result<int> broken{Status::Ok()};
  CHECK(broken.status().code() == Code::kInternalError);
}

TEST_CASE("Status copies share the message; moves and assignments keep it valid", "[core]") {
  Status original = Status::Timeout("rank 1 did not answer");
  {
    Status copy = original;  // shares the text
    Status assigned;
    assigned = copy;
    CHECK(assigned.message() == "rank 1 did not answer");
    CHECK(assigned.code() == Code::kTimeout);
    Status moved = std::move(copy);
    CHECK(moved.message() == "rank 1 did not answer");
    assigned = Status::Ok();  // drops a reference
    CHECK(assigned.ok());
    CHECK(assigned.message().empty());
    moved = std::move(original);  // the last-but-one owner takes over
    CHECK(moved.message() == "rank 1 did not answer");
    original = moved;
  }
  // The copies above are gone; the text lives on in the last owner.
  CHECK(original.message() == "rank 1 did not answer");
  Status& self = original;
  original = self;  // self-assignment keeps it
  CHECK(original.code() == Code::kTimeout);
  CHECK(original.message() == "rank 1 did not answer");
  CHECK(Status::Ok().message().empty());
}

}  // namespace braid
