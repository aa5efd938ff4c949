// The JSON report (-J), nccl-tests' format version 2: keys as nccl-tests' src/util.cu writes
// them (its quirks included: booleans as the strings "true"/"false", the root as the table's
// "%6i" string), plus "collective" and "nranks". See docs/BENCHMARKS.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/perf_flags.h"

namespace braid::bench {

struct JsonResult {  // one of a row's two halves
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = -1;  // < 0: not checked (null)
};

struct JsonRow {
  size_t bytes = 0;
  size_t count = 0;
  std::string type;
  std::string redop;
  int root = -1;
  JsonResult out_of_place;
  JsonResult in_place;
  int iterations = 0;
};

struct JsonDevice {
  int rank = 0;
  int pid = 0;
  std::string hostname;
  int device = -1;                       // the CUDA ordinal with --device cuda
  std::string device_hex = "cpu";        // its PCI bus id
  std::string device_info = "host memory";
};

// With --device cuda, all_reduce_perf's memory bound for rows of >= 64 MiB: N ranks sharing a
// GPU read N inputs and write N outputs, so t >= 2 N S / B (B: the device-to-device copy rate
// measured in the same run, bytes read + written per second).
struct JsonBoundRow {
  size_t bytes = 0;
  double bound_us = 0;
  double bound_busbw = 0;
  double out_of_place_percent = 0;  // of the bound reached: bound time / measured time
  double in_place_percent = 0;
};
struct JsonMemoryBound {
  double copy_gbps = 0;  // B, GB/s
  int ranks_per_gpu = 0; // N
  std::vector<JsonBoundRow> rows;
};

struct JsonReport {
  std::string collective;  // "all_reduce_perf"
  int nranks = 1;
  int braid_version = 0;
  std::string start_time, end_time;  // "%Y-%m-%d %H:%M:%S", local time
  std::vector<std::string> args;     // argv
  std::vector<std::string> env;      // "NAME=value": launch and BRAID_* variables, no secrets
  PerfOptions options;
  std::vector<JsonDevice> devices;
  std::vector<JsonRow> rows;
  int errors = 0;                    // rows with wrong elements ("out_of_bounds")
  double avg_busbw = 0;
  std::vector<std::string> messages; // "errors": failed braid calls
  std::string buffers = "host";      // "cuda" with --device cuda (then "buffers" is written)
  JsonMemoryBound memory_bound;      // written when it has rows
};

// The whole document, one line per result row for readability; ends with "\n".
std::string FormatJson(const JsonReport& report);
// nccl-tests' string escaping: quotes, backslash, slash, tab, newline; other control and
// non-ASCII bytes are dropped.
std::string JsonString(const std::string& text);
// The environment entries a report keeps (launch variables and BRAID_*, minus BRAID_SECRET).
bool KeepEnvEntry(const char* entry);
// Opens `path` for writing without overwriting, as nccl-tests: if it exists, tries path.0,
// path.1, ... Returns nullptr (and *opened = "") when it cannot.
FILE* OpenJsonFile(const std::string& path, std::string* opened);

}  // namespace braid::bench
