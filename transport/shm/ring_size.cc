// The ring size by placement (see ring_size.h for why).
#include "transport/shm/ring_size.h"

#include <sched.h>
#include <unistd.h>

namespace braid::transport::shm {

RingSizeChoice ChooseRingBytes(int ranks, int online_cpus, int allowed_cpus) {
  const std::string counts = std::to_string(ranks) + " ranks, " + std::to_string(online_cpus) +
                             " CPUs online";
  if (online_cpus <= 0 || allowed_cpus <= 0 || ranks <= online_cpus) {
    return {kCacheResidentRingBytes, kCacheResidentRingBytes,
            "rings of 1 MiB (" + counts + ": a CPU per rank, the ring stays in cache)"};
  }
  if (allowed_cpus == 1) {
    return {kCacheResidentRingBytes, kCacheResidentRingBytes,
            "rings of 1 MiB (" + counts +
                ", this rank pinned to one CPU: its neighbours are placed, the ring stays in "
                "cache)"};
  }
  return {kSharedCpuRingBytes, kCacheResidentRingBytes,
          "rings of 4 MiB to other processes (" + counts + ", this rank may run on " +
              std::to_string(allowed_cpus) +
              " of them: fewer hand-overs where the scheduler puts peers on one CPU), 1 MiB "
              "between threads"};
}

RingSizeChoice ChooseRingBytesHere(int ranks) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int allowed = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : -1;
  return ChooseRingBytes(ranks, static_cast<int>(online), allowed);
}

}  // namespace braid::transport::shm
