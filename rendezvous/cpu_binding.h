// CPU binding for the ranks braidrun starts (`--bind-to`), as mpirun's --bind-to core.
//
// Why bind: a rank the kernel moves between cores, or places on the core its peer is using, loses
// its turn. With a CPU per rank that happens as soon as anything else runs beside the job: with
// one busy process beside a 2-rank job on 2 cores, an 8-byte allreduce took ~100 us unbound (the
// two ranks and the busy loop pass the cores around) against 0.23 us bound (Open MPI, which binds
// by default: 0.56 us bound, 2 ms unbound; issue 24, bench/contention.sh measures it).
//
// Why `auto` does not bind past one rank per CPU: there the ranks take turns on the cores either
// way, and a rank pinned to a core that something else also wants cannot move away. Quiet, 4 ranks
// on 2 cores (bench/contention.sh, docs/PERFORMANCE.md): alone, binding one per core is 1.4x
// faster (8 B 3.5 against 4.9 us, 16 MiB 10.8 against 15.7 ms); beside one busy process it is
// 200x slower at 8 B (1898 against 9.2 us) and 1.7x at 16 MiB (31 against 18 ms). Unbound loses
// least, as Open MPI's default does there (it binds nothing once oversubscribed). `core` still
// binds one per core, wrapping, for a job that knows it has the node to itself.
//
// Why the default binds to a share rather than one core: a multithreaded rank (a PyTorch process
// and its intra-op threads) bound to one core loses all the others. So `auto` gives each local
// rank its own block of CPUs/ranks consecutive allowed CPUs (one each when ranks match CPUs, 8
// each for 2 ranks on 16): the ranks never share a core with each other and keep every CPU of the
// node between them. Past one rank per CPU it binds nothing.
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
  kAuto,  // a block of CPUs/ranks CPUs per rank; none when the ranks outnumber the CPUs (default)
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
