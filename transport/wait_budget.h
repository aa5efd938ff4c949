// Waiting for a peer on a caller-driven transport (shared memory, TCP): spin, then yield, then
// sleep (shm: on a futex; TCP: in poll()).
//
// Why three phases (numbers measured on the 2-core development VM, see the anchors README):
// - A one-way message through shared memory takes ~0.2 us when the receiver spins, while a
//   futex or condition-variable wake-up costs ~30 us. With one rank per core, a peer that is
//   about to answer answers within microseconds, so spinning first decides small-message latency.
// - With more ranks than cores (4-8 ranks on 2 cores) the peer we wait for may not be running at
//   all; spinning then only steals its core. sched_yield() hands the core to a runnable peer at
//   once and returns at once when nobody else wants it, so a yielding waiter costs its peers
//   almost nothing and still answers within microseconds.
// - Then the waiter sleeps: shm on the futex word of its side of the segment (shm/wait.h), TCP
//   in poll() on its sockets and an eventfd of its own (tcp/tcp_connection.h). Either way it
//   announces itself before re-checking, and whoever completes something looks for sleepers
//   after publishing, so no wake-up is lost and the fast path makes no system call.
// - The phases restart whenever data moves (a message piece, a completion), so a long transfer
//   in many ring pieces keeps both sides spinning instead of paying a wake-up per piece.
//
// How long each phase lasts depends on whether the ranks can have a core each (WaitBudget):
// - dedicated (communicator size <= online CPUs, and the process bound to some of them, so it
//   owns its cores; see For): spin 100 us -- a 512 KiB ring-allreduce chunk
//   takes ~50 us, and a yield on a machine that also runs other work (a build, another job) can
//   hand the core away for milliseconds -- then yield until 2 ms, then sleep;
// - oversubscribed: no spin -- check once, then yield at once (the peer we wait for is as likely
//   as not queued behind us on our own core: 4 ranks, 8-byte allreduce, measured 25-37 us with a
//   5 us spin and 6-8 us without, Open MPI 5.5-7.4 us in the same minutes) -- yield until 300 us
//   (a few wake-up costs: a wait that outlasts it is long enough that sleeping is cheap by
//   comparison), then sleep. This is what lets 8 ranks share 2 cores without starving.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/base/cpu_relax.h"
#include "core/base/deadline.h"

namespace braid::transport {

// What phases 1 and 2 of a wait did (WaitBudget::SpinOrYield).
enum class WaitStep { kSpun, kYielded, kSleep };

struct WaitBudget {
  int64_t spin_ns;   // spin this long after the last progress
  int64_t yield_ns;  // then yield until this long after it, then sleep
  // Phases 1 and 2 for a wait that has seen no progress for `idle_ns`: one CpuRelax() while
  // spinning, one sched_yield() while yielding; kSleep (having done nothing) once it is time for
  // the transport's own sleep. The caller polls again after kSpun and kYielded.
  WaitStep SpinOrYield(int64_t idle_ns) const;
  static WaitBudget Dedicated() { return {100'000, 2'000'000}; }
  static WaitBudget Oversubscribed() { return {0, 300'000}; }
  // Dedicated if `ranks` ranks fit on this machine's online CPUs (an upper bound on the ranks
  // sharing it) and this process was bound to some of them (braidrun, mpirun --bind-to core,
  // srun --cpu-bind): a rank that owns its cores gains from spinning. Else oversubscribed: a
  // rank that may run anywhere shares its core with whatever else runs, where a spinning waiter
  // burns the time slice its peer needs (2 unbound ranks on the 2-core VM under load, 8-byte
  // allreduce: 635 us spinning first against 7.7 us yielding; beside a busy loop 2212 against
  // 2.2 us; bound and spinning 0.14 and 0.35 us; docs/PERFORMANCE.md, "Ranks that do not own a
  // core").
  static WaitBudget For(int ranks);
  // As Config::wait_policy says: "spin" Dedicated, "yield" Oversubscribed, else For(ranks).
  static WaitBudget For(int ranks, const std::string& policy);
};

using braid::CpuRelax;

// Monotonic nanoseconds (vDSO clock_gettime; ~20 ns).
int64_t NowNs();

// `deadline` on NowNs()'s clock, given `now` = NowNs(); INT64_MAX for a deadline that never comes.
inline int64_t EndNs(Deadline deadline, int64_t now) {
  if (deadline.when() == Deadline::Clock::time_point::max()) return INT64_MAX;
  return now + std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.when() -
                                                                    Deadline::Clock::now())
                   .count();
}

}  // namespace braid::transport
