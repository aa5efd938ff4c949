// The waiting phases' lengths and clock (see wait_budget.h).
#include "transport/wait_budget.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

namespace braid::transport {

WaitBudget WaitBudget::For(int ranks) {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus <= 0 || ranks > cpus) return Oversubscribed();
  // A process that may run on every CPU was placed by nobody: it shares its core with whatever
  // else runs (torchrun binds nothing, a framework has busy threads of its own).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return Dedicated();
  return CPU_COUNT(&allowed) < cpus ? Dedicated() : Oversubscribed();
}

WaitBudget WaitBudget::For(int ranks, const std::string& policy) {
  if (policy == "spin") return Dedicated();
  if (policy == "yield") return Oversubscribed();
  return For(ranks);
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

WaitStep WaitBudget::SpinOrYield(int64_t idle_ns) const {
  if (idle_ns < spin_ns) {
    CpuRelax();  // phase 1: the peer is probably about to answer
    return WaitStep::kSpun;
  }
  if (idle_ns < yield_ns) {
    sched_yield();  // phase 2: let a runnable peer have the core
    return WaitStep::kYielded;
  }
  return WaitStep::kSleep;
}

}  // namespace braid::transport
