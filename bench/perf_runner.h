// The driver every *_perf program's main calls: flags, communicator, the sweep, the table and
// the JSON report.
#pragma once

#include "bench/perf_collective.h"

namespace braid::bench {

// Parses flags, initializes a communicator from the environment (braidCommInitEnv), runs the
// sweep and prints the table on rank 0. Returns the process exit status: 0, 1 if any element
// was wrong, 2 for bad flags, 3 if a braid call (or, with --device cuda, a CUDA call) failed
// (after printing braidGetLastError or CUDA's message), 77 if --device cuda found no GPU or the
// bench was built without CUDA (after "# SKIPPED: ..."; nothing was measured).
int PerfMain(int argc, char** argv, const Collective& collective);

}  // namespace braid::bench
