// The shm transport's ring size by placement (transport/shm/ring_size.h): 1 MiB with a CPU per
// rank or a pinned rank, 4 MiB to other processes where ranks outnumber the CPUs and this one
// may run on several; 1 MiB between threads of one process always.
#include <sched.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "transport/shm/ring_size.h"

namespace braid::transport::shm {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST_CASE("shm ring size: a CPU per rank keeps the cache-resident ring", "[shm]") {
  for (int ranks : {2, 3, 4}) {
    const RingSizeChoice choice = ChooseRingBytes(ranks, 4, 4);
    CHECK(choice.cross_process_bytes == 1 * kMiB);
    CHECK(choice.same_process_bytes == 1 * kMiB);
    CHECK_THAT(choice.reason, Catch::Contains("a CPU per rank"));
  }
}

TEST_CASE("shm ring size: more ranks than CPUs, unpinned: 4 MiB to other processes", "[shm]") {
  const RingSizeChoice choice = ChooseRingBytes(4, 2, 2);
  CHECK(choice.cross_process_bytes == 4 * kMiB);
  CHECK(choice.same_process_bytes == 1 * kMiB);
  CHECK_THAT(choice.reason, Catch::Contains("4 ranks, 2 CPUs online"));
  CHECK_THAT(choice.reason, Catch::Contains("may run on 2"));
  // Allowed on a subset of several CPUs is still placed by the scheduler.
  CHECK(ChooseRingBytes(64, 16, 4).cross_process_bytes == 4 * kMiB);
}

TEST_CASE("shm ring size: a rank pinned to one CPU keeps 1 MiB", "[shm]") {
  const RingSizeChoice choice = ChooseRingBytes(4, 2, 1);
  CHECK(choice.cross_process_bytes == 1 * kMiB);
  CHECK(choice.same_process_bytes == 1 * kMiB);
  CHECK_THAT(choice.reason, Catch::Contains("pinned to one CPU"));
}

TEST_CASE("shm ring size: unknown CPU counts fall back to 1 MiB", "[shm]") {
  CHECK(ChooseRingBytes(8, -1, 2).cross_process_bytes == 1 * kMiB);
  CHECK(ChooseRingBytes(8, 2, -1).cross_process_bytes == 1 * kMiB);
  CHECK(ChooseRingBytes(8, 0, 0).cross_process_bytes == 1 * kMiB);
}

// ChooseRingBytesHere reads this thread's affinity: pinned to one CPU it must say so, whatever
// the host has.
TEST_CASE("shm ring size: this process pinned to one CPU", "[shm]") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
  int first = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE && first < 0; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) first = cpu;
  }
  REQUIRE(first >= 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int ranks = static_cast<int>(online) + 1;  // more ranks than CPUs
  const RingSizeChoice pinned = ChooseRingBytesHere(ranks);
  REQUIRE(sched_setaffinity(0, sizeof(saved), &saved) == 0);
  CHECK(pinned.cross_process_bytes == 1 * kMiB);
  CHECK_THAT(pinned.reason, Catch::Contains("pinned to one CPU"));
  const RingSizeChoice here = ChooseRingBytesHere(ranks);
  CHECK(here.cross_process_bytes == (CPU_COUNT(&saved) > 1 ? 4 * kMiB : 1 * kMiB));
}

}  // namespace
}  // namespace braid::transport::shm
