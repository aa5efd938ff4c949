#include "rendezvous/launch_env.h"

#include <cerrno>
#include <cstdlib>

namespace braid::rendezvous {
namespace {

const char* Get(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

Result<int> ParseInt(const char* name, const char* text, int min, int max) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max) {
    return Status::InvalidArgument(std::string(name) + "='" + text + "' is not an integer in [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<int>(value);
}

Result<int> RequireInt(const char* name, int min, int max) {
  const char* text = Get(name);
  if (text == nullptr) return Status::InvalidArgument(std::string(name) + " is not set");
  return ParseInt(name, text, min, max);
}

Result<int> OptionalInt(const char* name, int min, int max, int fallback) {
  const char* text = Get(name);
  if (text == nullptr) return fallback;
  return ParseInt(name, text, min, max);
}

}  // namespace

Result<LaunchEnvironment> ReadLaunchEnvironment() {
  LaunchEnvironment env;
  constexpr int kMaxRanks = 1 << 24;
  bool master_required = false;
  if (Get("RANK") != nullptr || Get("WORLD_SIZE") != nullptr) {
    env.source = "torchrun";
    master_required = true;
    BRAID_ASSIGN_OR_RETURN(env.world_size, RequireInt("WORLD_SIZE", 1, kMaxRanks));
    BRAID_ASSIGN_OR_RETURN(env.rank, RequireInt("RANK", 0, kMaxRanks));
    BRAID_ASSIGN_OR_RETURN(env.local_rank, OptionalInt("LOCAL_RANK", 0, kMaxRanks, env.rank));
  } else if (Get("SLURM_PROCID") != nullptr) {
    env.source = "SLURM";
    BRAID_ASSIGN_OR_RETURN(env.world_size, RequireInt("SLURM_NTASKS", 1, kMaxRanks));
    BRAID_ASSIGN_OR_RETURN(env.rank, RequireInt("SLURM_PROCID", 0, kMaxRanks));
    BRAID_ASSIGN_OR_RETURN(env.local_rank, OptionalInt("SLURM_LOCALID", 0, kMaxRanks, env.rank));
  } else if (Get("OMPI_COMM_WORLD_RANK") != nullptr) {
    env.source = "Open MPI";
    BRAID_ASSIGN_OR_RETURN(env.world_size, RequireInt("OMPI_COMM_WORLD_SIZE", 1, kMaxRanks));
    BRAID_ASSIGN_OR_RETURN(env.rank, RequireInt("OMPI_COMM_WORLD_RANK", 0, kMaxRanks));
    BRAID_ASSIGN_OR_RETURN(env.local_rank,
                           OptionalInt("OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks, env.rank));
  } else {
    return Status::InvalidArgument(
        "env:// found no launcher variables: set RANK and WORLD_SIZE (torchrun, braidrun), or run "
        "under srun (SLURM_PROCID) or mpirun (OMPI_COMM_WORLD_RANK)");
  }
  if (env.rank >= env.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(env.rank) + " from " + env.source +
                                   " variables is not below the world size " +
                                   std::to_string(env.world_size));
  }
  const char* addr = Get("MASTER_ADDR");
  if (addr == nullptr && master_required) {
    return Status::InvalidArgument("MASTER_ADDR is not set (needed with RANK/WORLD_SIZE)");
  }
  env.master_addr = addr != nullptr ? addr : "127.0.0.1";
  if (master_required) {
    BRAID_ASSIGN_OR_RETURN(env.master_port, RequireInt("MASTER_PORT", 1, 65535));
  } else {
    BRAID_ASSIGN_OR_RETURN(env.master_port, OptionalInt("MASTER_PORT", 1, 65535, 29500));
  }
  const char* hosted = Get("BRAID_STORE_HOSTED");
  env.store_hosted = hosted != nullptr && std::string(hosted) != "0";
  if (const char* secret = Get("BRAID_SECRET")) env.secret = secret;
  return env;
}

}  // namespace braid::rendezvous
