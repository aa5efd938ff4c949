#include "rendezvous/cpu_binding.h"

#include <cerrno>
#include <cstring>

namespace braid::rendezvous {

Result<BindPolicy> ParseBindPolicy(const std::string& text) {
  if (text == "auto") return BindPolicy::kAuto;
  if (text == "none") return BindPolicy::kNone;
  if (text == "core") return BindPolicy::kCore;
  return Status::InvalidArgument("--bind-to expects auto, none or core, got '" + text + "'");
}

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int CpuForRank(BindPolicy policy, int local_rank, int local_ranks, const std::vector<int>& cpus) {
  if (cpus.empty() || policy == BindPolicy::kNone) return -1;
  if (policy == BindPolicy::kAuto && local_ranks <= static_cast<int>(cpus.size())) return -1;
  return cpus[static_cast<size_t>(local_rank) % cpus.size()];
}

ScopedThreadAffinity::ScopedThreadAffinity(int cpu) {
  if (cpu < 0) return;
  CPU_ZERO(&saved_);
  if (sched_getaffinity(0, sizeof(saved_), &saved_) != 0) {
    error_ = std::string("sched_getaffinity: ") + std::strerror(errno);
    return;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) {
    error_ = "cannot bind to CPU " + std::to_string(cpu) + ": " + std::strerror(errno);
    return;
  }
  restore_ = true;
}

ScopedThreadAffinity::~ScopedThreadAffinity() {
  if (restore_) (void)sched_setaffinity(0, sizeof(saved_), &saved_);
}

}  // namespace braid::rendezvous
