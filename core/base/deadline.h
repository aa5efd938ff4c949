// Deadline: a point on the steady clock after which a blocking wait gives up.
//
// Every blocking wait in braid takes one (DESIGN: "nothing waits forever"); passing absolute
// deadlines down, rather than durations, keeps a multi-step wait within its original budget.
#pragma once

#include <chrono>
#include <cstdint>

namespace braid {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline AfterMs(int64_t ms) {
    return Deadline(Clock::now() + std::chrono::milliseconds(ms));
  }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }
  explicit Deadline(Clock::time_point when) : when_(when) {}

  bool Expired() const { return Clock::now() >= when_; }
  Clock::time_point when() const { return when_; }
  // Milliseconds left, clamped at 0 (and at a large value for Never()).
  int64_t RemainingMs() const {
    if (when_ == Clock::time_point::max()) return INT64_C(1) << 40;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when_ - Clock::now());
    return left.count() > 0 ? left.count() : 0;
  }
  // The earlier of this deadline and `ms` from now.
  Deadline Min(int64_t ms) const {
    Deadline other = AfterMs(ms);
    return other.when_ < when_ ? other : *this;
  }

 private:
  Clock::time_point when_;
};

}  // namespace braid
