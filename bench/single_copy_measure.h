// What bench/calibrate measures for the shm single-copy choice (algorithms/single_copy_choice.h):
// the exchange rate of two processes of this host sending each other messages of one size at
// once, through the shared ring (two copies) and by cross-memory attach (one copy,
// process_vm_readv), size by size, and the crossover it implies.
//
// How: two ranks as forked processes hold two communicators each, one forced to the ring and one
// forced to single copy (braidConfig_t::shmSingleCopyBytes 0 and 1), and alternate between them
// round by round. Every round moves 16 MiB each way (many messages of a small size, one of 16 MiB),
// all posted at once as a collective streams its chunks, the same buffers every time, so sizes up
// to a few MiB stay in the caches as a collective's chunks do, and 16 MiB does not. The choice rests on the median over the rounds of each pair's
// ratio (a ring round and the single-copy round next to it), not on the best rounds: on a shared
// machine the best round of each path is whichever happened to meet a quiet moment, and two
// neighbouring rounds meet the same load (the development VM under load 13-19 gave best-round
// rates that put the crossover anywhere from 256 KiB to never, run to run).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace braid::bench {

struct SingleCopyPoint {
  size_t bytes = 0;        // message size
  double ring_gbps = 0;    // per direction, through the shared ring
  double single_gbps = 0;  // per direction, process_vm_readv from the peer's buffer
  // Median over the rounds of (ring round's time / the neighbouring single-copy round's time):
  // above 1, single copy was faster.
  double paired_speedup = 0;
};

struct SingleCopyMeasurement {
  // Empty when cross-memory attach is refused here (then `refused` says why) or a run failed.
  std::vector<SingleCopyPoint> points;
  std::string refused;
  // The smallest measured size where single copy's paired speedup is at least kSingleCopyMargin
  // and at no larger size below 1 / kSingleCopyMargin; 0 (never) when there is none, or refused.
  size_t min_bytes = 0;
  double single_gbps_16m = 0;  // the single-copy rate of 16 MiB messages; 0 when refused
};

// Single copy's paired speedup must reach this to be chosen: a tie keeps the ring.
constexpr double kSingleCopyMargin = 1.05;

// Whether a process may read a sibling's memory here, tried for real between two forked
// processes (Yama's ptrace_scope, a container without CAP_SYS_PTRACE and seccomp refuse it).
// "" if it may, else the reason.
std::string CrossMemoryRefusal();

// Runs the measurement (tens of seconds). `ok` false when a run failed (printed on stderr).
// `shared_core`: both ranks pinned to one CPU, as ranks take turns on the cores of a host that
// runs more ranks than it has CPUs. Why measured apart: a send by reference completes only once
// the receiver has copied it, so where the two take turns every message waits for a switch,
// while the ring lets the sender run ahead by a ring's worth; on the development VM single copy
// was 2-20x slower than the ring in 4-rank all-gathers and broadcasts on 2 CPUs
// (docs/PERFORMANCE.md) although 2 ranks with a CPU each measured it within a few percent.
SingleCopyMeasurement MeasureSingleCopy(bool shared_core, bool* ok);

// The crossover of `points` (ascending sizes) under kSingleCopyMargin; 0 for none.
size_t SingleCopyCrossover(const std::vector<SingleCopyPoint>& points);

}  // namespace braid::bench
