// Communicator settings: built-in defaults, then BRAID_* environment variables (read once per
// process), then per-communicator overrides from braidConfig_t.
//
// Every variable is listed in README.md's table; keep the two in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace braid {

struct Config {
  // BRAID_TIMEOUT_MS: deadline of every blocking wait (init, collectives, store calls).
  int64_t timeout_ms = 30 * 60 * 1000;
  // BRAID_CHUNK_BYTES: pipelining unit of the ring algorithms.
  size_t chunk_bytes = 512 * 1024;
  // BRAID_DEVICE_CHUNK_BYTES: the device path's pipelining unit: a device-buffer collective is
  // staged through pinned host memory in steps of at most this many bytes, so the copies of one
  // step overlap the host collective of another (core/device_path/staged_op.h); 0 stages the
  // whole message at once. Must be the same on every rank.
  size_t device_chunk_bytes = 1024 * 1024;
  // BRAID_DEVICE_ALGO: how device-buffer collectives run where the communicator's ranks are all
  // on this host and may link over cuda_ipc: "direct" (or empty, the default: device memory end to
  // end, core/device_path/direct_collectives.h) or "staged" (through pinned host memory and the
  // host transports, as everywhere else). Must be the same on every rank.
  std::string device_algo;
  // BRAID_SOCKET_IFNAME: NCCL's syntax ("eth", "^docker", "=eth0", comma-separated).
  std::string socket_ifname;
  // BRAID_SOCKET_FAMILY: "AF_INET", "AF_INET6", or empty for either.
  std::string socket_family;
  // BRAID_TRANSPORTS: which transports may be used, e.g. "tcp" or "^shm".
  std::string transports;
  // BRAID_ALGO: algorithm constraints, e.g. "allreduce:tree;broadcast:ring" (algorithms/selector.h).
  std::string algo;
  // BRAID_TUNE: 1 (the default) settles the cost model's ties by timing both algorithms on the
  // job's own calls (algorithms/algorithm_trials.h); 2 does so for every call with two allowed
  // algorithms, tie or not, from 2 ranks; 0 runs the model's pick everywhere.
  int tune = 1;
  // BRAID_CHECK=1: before each collective, ranks compare op, datatype, count and root, so a
  // mismatch is reported (naming the rank and both descriptions) instead of hanging or mixing data.
  bool check = false;
  // BRAID_COMM_SPLIT_SHARE_RESOURCES=1 (NCCL's name, NCCL_ prefix swapped): a communicator made
  // by Split reaches its peers through its parent's links instead of its own (core/link_pool.h).
  bool split_share = false;
  // BRAID_SHM_SINGLE_COPY_BYTES: messages of at least this many bytes between ranks of one host
  // in different processes are copied once, by the receiver straight out of the sender's buffer
  // (cross-memory attach, process_vm_readv), instead of twice through the shared ring; 0: never.
  // Unset (-1): the calibration file's measured choice (shm.single_copy_bytes, written by
  // bench/calibrate), else never. Where the kernel refuses cross-memory attach the ring carries
  // everything whatever this says.
  int64_t shm_single_copy_bytes = -1;
  // BRAID_WAIT_POLICY: how a rank waits for its peers on shm and tcp (transport/wait_budget.h):
  // "auto" (or empty, the default) spins first when the communicator's ranks fit on the CPUs
  // online and the process was bound to some of them (it owns its cores), else yields at once;
  // "spin" always spins first; "yield" never spins.
  // Why a knob: a rank that shares its core with work braid does not see (another job, a
  // framework's threads) loses differently under each; bench/contention.sh measures them.
  std::string wait_policy;
};

// Parses the environment once per process; an unparsable value is an error naming the variable.
Result<Config> ConfigFromEnvironment();

// Parses an environment variable holding a non-negative integer; `fallback` if unset or empty.
Result<int64_t> IntFromEnvironment(const char* name, int64_t fallback);

}  // namespace braid
