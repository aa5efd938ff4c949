// Whether large shared-memory messages between processes of one host take one copy or two, and
// from which size: the communicator asks once, before it creates its transports.
//
// Why a choice at all: a message between two processes of one host can go through the shared
// ring (the sender copies it in, the receiver copies it out: two copies, on two cores at once) or
// by cross-memory attach (the receiver copies it straight out of the sender's buffer with
// process_vm_readv: one copy, but the kernel pins the sender's pages for every call). Which is
// faster depends on the machine, not on braid: on the 2-core development VMs the ring wins at
// every size (transport/shm/shm_transport.h has the table), on hosts where pinning is cheap one
// copy wins from some size up. So the answer is measured where braid runs, by bench/calibrate,
// which times both on this host and writes the crossover into the calibration file
// (shm.single_copy_bytes; docs/ALGORITHMS.md, "Calibration file"), and read from there.
//
// Why two thresholds: a message sent by reference completes only once the receiver has copied
// it, so where ranks take turns on the CPUs every message waits for a switch, while the ring lets
// the sender run ahead; calibrate measures both cases (single_copy_bytes with a CPU per rank,
// single_copy_bytes_shared_cores with two ranks on one CPU). Which applies is decided before the
// peers are known, so conservatively: where the communicator has more ranks than this host has
// CPUs online (they might all be on this host), single copy only from where both measurements
// favour it. Both, because two ranks on one CPU alone over-favour it: there the ring's two copies
// run one after the other, while ranks that share several CPUs still copy in parallel (on the
// development VM the one-CPU pair measured single copy 1.2-1.8x faster, and 4-rank all-gathers
// and broadcasts on its 2 CPUs ran 1.1-2.4x slower by single copy; docs/PERFORMANCE.md). Online, not this
// process's affinity: launchers such as braidrun bind each rank to one CPU of its own, so the
// affinity of a rank says nothing about whether ranks share CPUs.
//
// Why this host's own file and not rank 0's (the cost model's numbers are rank 0's,
// core/calibration_agreement.h): the copy is made by the receiving process on its own host, and
// the choice is the sender's per message, so two ranks choosing differently still agree on
// every message (the receiver takes whichever way each one comes).
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/calibration.h"

namespace braid::algorithms {

struct SingleCopyChoice {
  // Messages of at least this many bytes go by single copy; 0: none (the ring carries all).
  int64_t min_bytes = 0;
  // Why, for the INFO line: who set it, or what the measurement found.
  std::string why;
};

// `configured` is Config::shm_single_copy_bytes: >= 0 when BRAID_SHM_SINGLE_COPY_BYTES or
// braidConfig_t::shmSingleCopyBytes set it (that wins), -1 when unset (then `calibration`'s
// shm entry decides; without a measurement, none). `ranks` is the communicator's size and `cpus`
// how many CPUs this host has online (OnlineCpuCount()). Never fails.
SingleCopyChoice ChooseShmSingleCopy(int64_t configured, const Calibration& calibration, int ranks,
                                     int cpus);

// The CPUs online on this host; at least 1.
int OnlineCpuCount();

// "single copy (process_vm_readv) from 256 KiB" or "the ring (two copies) at every size".
std::string DescribeSingleCopy(int64_t min_bytes);

}  // namespace braid::algorithms
