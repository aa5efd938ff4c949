// CPU binding for the ranks braidrun starts (`--bind-to`), as mpirun's --bind-to core.
//
// Why bind: when a node runs more ranks than it has CPUs, the ranks take turns on the cores, and
// a rank the kernel migrates between cores or places beside the wrong neighbour loses its turn
// more often. Bound one per core in rank order (rank r on the r-th allowed CPU, wrapping), the
// same ranks always share a core and each small message costs one hand-over, not a migration:
// 4 ranks on 2 cores, 8-byte allreduce 8.9-11.3 us unbound vs 6.4-7.2 us bound
// (docs/PERFORMANCE.md). Why not always: a rank that has a core to itself gains little, and a
// multithreaded rank (a PyTorch process and its intra-op threads) bound to one core loses all
// the others, so the default binds only when the node is oversubscribed.
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
  kAuto,  // core when the node's ranks outnumber its allowed CPUs, else none (the default)
  kNone,
  kCore,
};

// "auto", "none" or "core"; anything else is an InvalidArgument naming the value.
Result<BindPolicy> ParseBindPolicy(const std::string& text);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

// The CPU local rank `local_rank` of `local_ranks` is bound to, or -1 for none.
int CpuForRank(BindPolicy policy, int local_rank, int local_ranks, const std::vector<int>& cpus);

// Sets the calling thread's affinity to `cpu` (no-op for -1) and restores it on destruction.
class ScopedThreadAffinity {
 public:
  explicit ScopedThreadAffinity(int cpu);
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
