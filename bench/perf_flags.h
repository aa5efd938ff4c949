// nccl-tests' command line for every *_perf program: the options, their parser and the usage text.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bindings/c/braid.h"

namespace braid::bench {

struct PerfOptions {
  int nthreads = 1;           // -t: accepted, only 1 supported
  int ngpus = 1;              // -g: accepted, only 1 supported
  size_t min_bytes = 32 << 20;  // -b
  size_t max_bytes = 32 << 20;  // -e
  size_t step_bytes = 1 << 20;  // -i
  size_t step_factor = 1;       // -f (> 1: multiply; else add step_bytes)
  int iters = 20;               // -n
  int agg_iters = 1;            // -m: collectives per timed iteration
  int warmup_iters = 1;         // -w
  int check = 1;                // -c: data checks per row (0: none, #wrong prints N/A)
  int root = 0;                 // -r: root of rooted collectives
  int blocking = 0;             // -z: 1 barrier after each collective; 2 accepted (calls block)
  int average = 1;              // -a: time across ranks: 0 rank 0, 1 avg, 2 min, 3 max
  std::vector<braidRedOp_t> ops{braidSum};            // -o (all: every op)
  std::vector<braidDataType_t> types{braidFloat32};   // -d (all: every type)
  std::string json_path;      // -J: nccl-tests' JSON report (rank 0 writes it); empty: none
  bool device_buffers = false;  // --device cuda: buffers in GPU memory, collectives on a stream
};

enum class ParseOutcome { kRun, kHelp, kError };

// Parses nccl-tests' flags (short and long forms). On kError, *error names the flag and the
// problem; the caller prints it and exits with status 2. Does not print or exit itself.
ParseOutcome ParsePerfArgs(int argc, char** argv, PerfOptions* options, std::string* error);
std::string PerfUsage(const char* program);

// "8", "1K", "64M", "1G" (nccl-tests' parsesize: binary units, case-insensitive, fractions
// allowed such as "1.5K"). False on anything else, negative values included.
bool ParseSize(const char* text, size_t* out);

}  // namespace braid::bench
