#include "rendezvous/cpu_binding.h"

#include <cerrno>
#include <cstddef>
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

std::vector<int> CpusForRank(BindPolicy policy, int local_rank, int local_ranks,
                             const std::vector<int>& cpus) {
  if (cpus.empty() || policy == BindPolicy::kNone || local_ranks < 1) return {};
  const size_t count = cpus.size();
  if (policy == BindPolicy::kCore) return {cpus[static_cast<size_t>(local_rank) % count]};
  // auto past one rank per CPU: unbound (cpu_binding.h says why).
  if (static_cast<size_t>(local_ranks) > count) return {};
  // auto with a CPU or more per rank: rank r takes the r-th block of count / local_ranks.
  const size_t share = count / static_cast<size_t>(local_ranks);
  const auto first =
      cpus.begin() + static_cast<std::ptrdiff_t>(share * static_cast<size_t>(local_rank));
  return std::vector<int>(first, first + static_cast<std::ptrdiff_t>(share));
}

ScopedThreadAffinity::ScopedThreadAffinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  CPU_ZERO(&saved_);
  if (sched_getaffinity(0, sizeof(saved_), &saved_) != 0) {
    error_ = std::string("sched_getaffinity: ") + std::strerror(errno);
    return;
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::string names;
  for (int cpu : cpus) {
    CPU_SET(cpu, &mask);
    names += (names.empty() ? "" : ",") + std::to_string(cpu);
  }
  if (sched_setaffinity(0, sizeof(mask), &mask) != 0) {
    error_ = "cannot bind to CPU " + names + ": " + std::strerror(errno);
    return;
  }
  restore_ = true;
}

ScopedThreadAffinity::~ScopedThreadAffinity() {
  if (restore_) (void)sched_setaffinity(0, sizeof(saved_), &saved_);
}

}  // namespace braid::rendezvous
