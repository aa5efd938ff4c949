// The single-copy choice (see single_copy_choice.h for the why).
#include "algorithms/single_copy_choice.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace braid::algorithms {
namespace {

std::string Bytes(int64_t bytes) {
  char text[48];
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) {
    std::snprintf(text, sizeof(text), "%lld MiB", static_cast<long long>(bytes >> 20));
  } else if (bytes >= 1024 && bytes % 1024 == 0) {
    std::snprintf(text, sizeof(text), "%lld KiB", static_cast<long long>(bytes >> 10));
  } else {
    std::snprintf(text, sizeof(text), "%lld bytes", static_cast<long long>(bytes));
  }
  return text;
}

std::string Rate(double gbps) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g GB/s", gbps);
  return text;
}

}  // namespace

std::string DescribeSingleCopy(int64_t min_bytes) {
  if (min_bytes <= 0) return "the ring (two copies) at every size";
  return "single copy (process_vm_readv) from " + Bytes(min_bytes);
}

int OnlineCpuCount() {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

SingleCopyChoice ChooseShmSingleCopy(int64_t configured, const Calibration& calibration, int ranks,
                                     int cpus) {
  SingleCopyChoice choice;
  if (configured >= 0) {
    choice.min_bytes = configured;
    choice.why = "set by BRAID_SHM_SINGLE_COPY_BYTES or braidConfig_t::shmSingleCopyBytes";
    return choice;
  }
  auto shm = calibration.values().find("shm");
  const bool shared_cores = ranks > cpus;
  const char* key = shared_cores ? "single_copy_bytes_shared_cores" : "single_copy_bytes";
  const bool measured = shm != calibration.values().end() && shm->second.count(key) != 0;
  if (!measured) {
    choice.why = "the calibration (" + calibration.source() +
                 ") has no single-copy measurement for this host; `bench/calibrate --write` "
                 "measures it";
    return choice;
  }
  const TransportCalibration& numbers = calibration.Of("shm");
  const auto own = static_cast<int64_t>(numbers.single_copy_bytes);
  const auto shared = static_cast<int64_t>(numbers.single_copy_bytes_shared_cores);
  choice.min_bytes = !shared_cores ? own : (own > 0 && shared > 0 ? std::max(own, shared) : 0);
  const std::string cores = shared_cores ? std::to_string(ranks) + " ranks, " +
                                               std::to_string(cpus) +
                                               " CPUs: ranks may share CPUs, so both measurements"
                                         : std::string("a CPU per rank");
  std::string rates;
  if (numbers.single_copy_gbps > 0) {
    rates = " (16 MiB exchanges: single copy " + Rate(numbers.single_copy_gbps) + ", ring " +
            Rate(numbers.bandwidth_gbps) + ")";
  }
  std::string found;
  if (choice.min_bytes > 0) {
    found = "single copy was faster from " + Bytes(choice.min_bytes) + " up";
  } else if (numbers.single_copy_gbps > 0) {
    found = shared_cores && shared > 0 ? "the ring was faster at every size with a CPU per rank"
                                       : "the ring was faster at every size measured";
  } else {
    found = "cross-memory attach was refused there (no ptrace rights)";
  }
  choice.why = "measured on this host by bench/calibrate (" + calibration.source() + ") for " +
               cores + ": " + found + rates;
  return choice;
}

}  // namespace braid::algorithms
