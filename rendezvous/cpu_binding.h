// CPU binding for the ranks braidrun starts (`--bind-to`), as mpirun's --bind-to core.
//
// Why bind: a rank the kernel moves between cores, or places on the core its peer is using, loses
// its turn. When a node runs more ranks than it has CPUs, the ranks take turns on the cores; bound
// one per core in rank order (rank r on the r-th allowed CPU, wrapping), the same ranks always
// share a core and each small message costs one hand-over, not a migration: 4 ranks on 2 cores,
// 8-byte allreduce 8.9-11.3 us unbound vs 6.4-7.2 us bound (docs/PERFORMANCE.md). With a CPU per
// rank the same holds as soon as anything else runs beside the job: with one busy process beside
// a 2-rank job on 2 cores, an 8-byte allreduce took ~100 us unbound (the two ranks and the busy
// loop pass the cores around) against 0.23 us bound (Open MPI, which binds by default: 0.56 us
// bound, 2 ms unbound; issue 24, bench/contention.sh measures it).
//
// Why the default binds to a share rather than one core: a multithreaded rank (a PyTorch process
// and its intra-op threads) bound to one core loses all the others. So `auto` gives each local
// rank its own block of CPUs/ranks consecutive allowed CPUs (one each when ranks match CPUs, 8
// each for 2 ranks on 16): the ranks never share a core with each other and keep every CPU of the
// node between them. Past one rank per CPU it binds one per core, wrapping, as `core` does.
//
// Why the spawning thread's mask: a child inherits the affinity of the thread that spawns it, so
// setting it around posix_spawn binds the rank from its first instruction, before it can start
// threads of its own; setting it on the child's pid afterwards would race with those threads.
#pragma once

#include <sched.h>

#include <string>
#include <vector>

#include "core/base/status.h"

namespace braid::rendezvous {

enum class BindPolicy {
  kAuto,  // a block of CPUs/ranks CPUs per rank; core when the ranks outnumber the CPUs (default)
  kNone,
  kCore,
};

// "auto", "none" or "core"; anything else is an InvalidArgument naming the value.
Result<BindPolicy> ParseBindPolicy(const std::string& text);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

// The CPUs (of `cpus`, the allowed ones) local rank `local_rank` of `local_ranks` is bound to;
// empty for none.
std::vector<int> CpusForRank(BindPolicy policy, int local_rank, int local_ranks,
                             const std::vector<int>& cpus);

// Sets the calling thread's affinity to `cpus` (no-op for none) and restores it on destruction.
class ScopedThreadAffinity {
 public:
  explicit ScopedThreadAffinity(const std::vector<int>& cpus);
  ~ScopedThreadAffinity();
  ScopedThreadAffinity(const ScopedThreadAffinity&) = delete;
  ScopedThreadAffinity& operator=(const ScopedThreadAffinity&) = delete;
  // Empty if the mask was set (or nothing was asked), else why not.
  const std::string& error() const { return error_; }

 private:
  bool restore_ = false;
  cpu_set_t saved_;
  std::string error_;
};

}  // namespace braid::rendezvous
