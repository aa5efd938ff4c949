// env:// — who this rank is and where the store is, from the launcher's environment variables.
//
// Order of precedence, as users of torchrun, SLURM and Open MPI expect:
//   1. RANK / WORLD_SIZE / LOCAL_RANK with MASTER_ADDR / MASTER_PORT (torchrun, braidrun);
//   2. SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (srun), with MASTER_ADDR / MASTER_PORT;
//   3. OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun), with MASTER_ADDR / MASTER_PORT.
// For 2 and 3, MASTER_ADDR defaults to 127.0.0.1 and MASTER_PORT to 29500 (one-host jobs).
// BRAID_STORE_HOSTED=1 says the launcher already hosts the store (braidrun does), so rank 0 must
// not start one; BRAID_SECRET is the secret store connections present.
#pragma once

#include <string>

#include "core/base/status.h"

namespace braid::rendezvous {

struct LaunchEnvironment {
  std::string source;  // "torchrun", "SLURM" or "Open MPI": named in error messages
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;
  bool store_hosted = false;
  std::string secret;
};

// Fails with InvalidArgument naming the missing or malformed variable.
Result<LaunchEnvironment> ReadLaunchEnvironment();

}  // namespace braid::rendezvous
