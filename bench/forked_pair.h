// Two ranks as forked child processes, for bench/calibrate's measurements: each child runs
// `body(rank)`, and what rank 0 returns comes back to the parent as bytes through a pipe.
//
// Why children of the calibrating process: every measurement starts its pair from the same state
// (no links, caches or threads left over from the one before), and the parent keeps the unique
// id's store alive meanwhile.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace braid::bench {

// Forks rank 0 and rank 1, each calling `body(rank)` and exiting 0 when it returns a value (1
// when nullopt). Returns rank 0's bytes once both exited 0, else nullopt (a failed fork or pipe
// is printed on stderr).
std::optional<std::string> RunForkedPair(
    const std::function<std::optional<std::string>(int rank)>& body);

}  // namespace braid::bench
