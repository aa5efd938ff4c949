// How big a link's rings are when ShmOptions leaves it to the transport (kRingBytesByPlacement):
// 1 MiB, or 4 MiB between processes that outnumber the CPUs without being pinned to one each.
//
// Why it depends on where the ranks run. A message larger than the ring streams through it, and
// the sender stops each time the ring is full until the receiver has copied some out. With a CPU
// per rank both copy at once and a ring that stays in the caches wins (1 MiB: two rings fit in
// L2/L3). With more ranks than CPUs, a rank that finds the ring full has to hand its CPU over, so
// every ring's worth of data costs a context switch or a sleep, and when the scheduler has put
// the two ends of a link on one CPU, nothing moves on that link until they take turns.
// `braidrun --bind-to core` pins such ranks round-robin, so ring neighbours sit on different CPUs
// and the small ring keeps every hand-over cache-hot; ranks nobody pinned (torch.multiprocessing,
// torchrun, a plain fork, and braidrun's default past one rank per CPU, rendezvous/cpu_binding.h)
// go wherever the scheduler puts them. Measured on the 2-CPU development
// VM with 4 ranks under SCHED_FIFO, beside other engineers' builds (docs/PERFORMANCE_HISTORY.md,
// "Four ranks on two CPUs"), the machine alternated within minutes between two states. In one,
// unpinned ranks ran far below pinned ones (torch's 4-rank allreduce 0.8-1.3 GB/s at 8-64 MiB,
// the low end of the swings issue 18 saw) and 4 MiB rings took them to 1.4-3.0 GB/s (1.4-3.6x)
// with a fifth to a third of the context switches; in the other (3.0-3.9 GB/s before) they cost
// 1-25%, and across the three ways 4 pinned ranks can share 2 CPUs they were neutral (geometric
// mean 1.00, cells 0.90-1.11). Pinned as `--bind-to core` pins them, 4 MiB rings cost all-gather
// and broadcast 10-33% in the first state, so a pinned rank keeps 1 MiB.
//
// Between thread ranks of one process large messages are copied once from the sender's buffer
// (ShmOptions::same_process_copy_bytes), so the ring carries only small ones there: those links
// keep 1 MiB, whatever the placement.
//
// The producer keeps to the first 1 MiB of a larger ring while its consumer keeps up (ring.h's
// hot window): without it 4 MiB rings made the unpinned 4-rank allreduce of 4-32 KiB 18-39%
// slower (cache misses); with it 2-6%.
//
// What it costs: a link's segment holds both rings and is faulted in when the link is made, so a
// pair of processes linked with 4 MiB rings holds 8 MiB of shared memory instead of 2 MiB.
#pragma once

#include <cstdint>
#include <string>

namespace braid::transport::shm {

// ShmOptions::ring_bytes value that leaves the choice to ChooseRingBytes.
constexpr uint64_t kRingBytesByPlacement = 0;
// A ring that stays in the caches: the choice with a CPU per rank, or a pinned rank.
constexpr uint64_t kCacheResidentRingBytes = uint64_t{1} << 20;
// The ring between processes that share CPUs where the scheduler places them.
constexpr uint64_t kSharedCpuRingBytes = uint64_t{4} << 20;

struct RingSizeChoice {
  uint64_t cross_process_bytes;  // rings of links to another process
  uint64_t same_process_bytes;   // rings of links between threads of this process
  std::string reason;            // for the INFO line: which and why
};

// For a communicator of `ranks` ranks on a host with `online_cpus` CPUs online, in a process
// allowed to run on `allowed_cpus` of them (a value <= 0 means unknown: taken as one CPU per
// rank, i.e. the cache-resident ring).
RingSizeChoice ChooseRingBytes(int ranks, int online_cpus, int allowed_cpus);

// The same for this process (sysconf(_SC_NPROCESSORS_ONLN), sched_getaffinity).
RingSizeChoice ChooseRingBytesHere(int ranks);

}  // namespace braid::transport::shm
