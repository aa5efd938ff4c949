// The waiting phases' lengths and clock (see wait_budget.h).
#include "transport/wait_budget.h"

#include <time.h>
#include <unistd.h>

namespace braid::transport {

WaitBudget WaitBudget::For(int ranks) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 && ranks <= cpus ? Dedicated() : Oversubscribed();
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace braid::transport
