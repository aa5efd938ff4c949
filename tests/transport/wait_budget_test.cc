// WaitBudget::For: which waiting phases a rank gets from the rank count, its CPU binding and
// BRAID_WAIT_POLICY (transport/wait_budget.h says why). The binding is this thread's affinity
// mask, set here for real with sched_setaffinity and restored after.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include "transport/wait_budget.h"

namespace braid::transport {
namespace {

bool SpinsFirst(const WaitBudget& budget) { return budget.spin_ns > 0; }

// Sets this thread's affinity to `cpus` CPUs of its current mask for the scope.
class BoundTo {
 public:
  explicit BoundTo(int cpus) {
    REQUIRE(sched_getaffinity(0, sizeof(saved_), &saved_) == 0);
    cpu_set_t fewer;
    CPU_ZERO(&fewer);
    int taken = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && taken < cpus; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) {
        CPU_SET(cpu, &fewer);
        ++taken;
      }
    }
    REQUIRE(sched_setaffinity(0, sizeof(fewer), &fewer) == 0);
  }
  ~BoundTo() { sched_setaffinity(0, sizeof(saved_), &saved_); }

 private:
  cpu_set_t saved_;
};

TEST_CASE("a rank spins first only when it was bound to CPUs it can own", "[wait_budget]") {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  REQUIRE(online >= 1);
  cpu_set_t mask;
  REQUIRE(sched_getaffinity(0, sizeof(mask), &mask) == 0);
  const bool unbound = CPU_COUNT(&mask) == online;
  // More ranks than CPUs: yield at once, bound or not.
  CHECK_FALSE(SpinsFirst(WaitBudget::For(static_cast<int>(online) + 1)));
  if (online >= 2) {
    BoundTo one(1);
    CHECK(SpinsFirst(WaitBudget::For(2)));
    CHECK_FALSE(SpinsFirst(WaitBudget::For(static_cast<int>(online) + 1)));
  }
  if (unbound) {
    // Free to run anywhere: placed by nobody, so it shares its core with whatever runs.
    CHECK_FALSE(SpinsFirst(WaitBudget::For(2)));
  } else {
    WARN("this test process was started bound to " << CPU_COUNT(&mask) << " of " << online
                                                  << " CPUs: the unbound case is not checked");
  }
}

TEST_CASE("BRAID_WAIT_POLICY overrides the choice", "[wait_budget]") {
  CHECK(SpinsFirst(WaitBudget::For(1 << 20, "spin")));
  CHECK_FALSE(SpinsFirst(WaitBudget::For(1, "yield")));
  CHECK(WaitBudget::For(3, "auto").spin_ns == WaitBudget::For(3).spin_ns);
  CHECK(WaitBudget::For(3, "").spin_ns == WaitBudget::For(3).spin_ns);
}

}  // namespace
}  // namespace braid::transport
