// The shared half of braid's nccl-tests-style *_perf programs.
//
// Why a copy of nccl-tests' dialect: people compare collectives libraries by pasting these
// tables side by side, and scripts parse them by column. Flags, preamble, header, row widths,
// number formatting and the closing lines follow nccl-tests 2.19 (see
// shared/anchors/nccl_tests_all_reduce_perf_1rank_h100.txt); buffers are host memory.
//
// Written only against the C API (bindings/c/braid.h), like any application: nothing from
// braid's C++ internals, so the bench also checks the API is enough to drive every collective.
// Each program defines a Collective (sizes, the braid call, bus-bandwidth factor, expected data)
// and hands it to PerfMain, which does the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings/c/braid.h"

namespace braid::bench {

// ---- Command line -----------------------------------------------------------------------------

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
  int blocking = 0;             // -z: 1 barrier after each collective; 2 accepted (host calls block)
  int average = 1;              // -a: time across ranks: 0 rank 0, 1 avg, 2 min, 3 max
  std::vector<braidRedOp_t> ops{braidSum};            // -o (all: every op)
  std::vector<braidDataType_t> types{braidFloat32};   // -d (all: every type)
};

enum class ParseOutcome { kRun, kHelp, kError };

// Parses nccl-tests' flags (short and long forms). On kError, *error names the flag and the
// problem; the caller prints it and exits with status 2. Does not print or exit itself.
ParseOutcome ParsePerfArgs(int argc, char** argv, PerfOptions* options, std::string* error);
std::string PerfUsage(const char* program);

// "8", "1K", "64M", "1G" (nccl-tests' parsesize: binary units, case-insensitive, fractions
// allowed such as "1.5K"). False on anything else, negative values included.
bool ParseSize(const char* text, size_t* out);

// ---- Types and ops, in nccl-tests' spelling ---------------------------------------------------

size_t TypeSize(braidDataType_t type);
const char* TypeName(braidDataType_t type);  // "int8" ... "half", "float", "double", "bfloat16"
const char* OpName(braidRedOp_t op);         // "sum", "prod", "max", "min", "avg"
bool IsFloatingType(braidDataType_t type);

// IEEE float16 / bfloat16 <-> float, round-to-nearest-even. The bench's own (deliberately not
// braid's kernels), so a conversion bug in braid cannot hide itself in the check.
uint16_t BenchFloatToHalf(float f);
float BenchHalfToFloat(uint16_t h);
uint16_t BenchFloatToBfloat16(float f);
float BenchBfloat16ToFloat(uint16_t b);

// ---- Data patterns and checking ---------------------------------------------------------------

// Reductions: rank `rank`'s input element i for `op` (a small integer, see perf_common.cc),
// and the exact result of reducing all ranks' inputs with braid's semantics (integers wrap;
// avg divides the sum once, truncating integers toward zero and rounding floating types in
// their own precision). `seed` varies the pattern between checks.
void FillReduceInput(braidDataType_t type, braidRedOp_t op, int rank, uint64_t seed, void* buf,
                     size_t count);
void FillReduceExpected(braidDataType_t type, braidRedOp_t op, int nranks, uint64_t seed,
                        void* buf, size_t count);
// Non-reductions (broadcast, gathers, all-to-all): element i of rank `rank`'s data.
void FillRankData(braidDataType_t type, int rank, uint64_t seed, void* buf, size_t count);

// Number of elements of `got` that differ from `expected`. Exact, except that floating avg
// allows 2 units in the last place (an implementation may scale by 1/n instead of dividing).
int64_t CountWrong(braidDataType_t type, braidRedOp_t op, const void* got, const void* expected,
                   size_t count);

// ---- The collective under test ----------------------------------------------------------------

// Element counts of one row, as nccl-tests' *GetCollByteCount: in-place runs use
// sendbuff = recvbuff + send_inplace_offset * rank, recvbuff += recv_inplace_offset * rank.
struct CollSizes {
  size_t send_count = 0;
  size_t recv_count = 0;
  size_t param_count = 0;  // the count argument of the braid call; the "count" column
  size_t send_inplace_offset = 0;
  size_t recv_inplace_offset = 0;
};

struct DataArgs {
  braidDataType_t type;
  braidRedOp_t op;
  int root;
  int rank;
  int nranks;
  uint64_t seed;
  const CollSizes* sizes;
  void* send;      // send_count elements to fill
  void* expected;  // recv_count elements: what recvbuff must hold afterwards on this rank
};

class Collective {
 public:
  virtual ~Collective() = default;
  // The program's name: "all_reduce_perf".
  virtual const char* Name() const = 0;
  // The braid call Run makes, for error messages: "braidAllReduce".
  virtual const char* CallName() const = 0;
  // Ops swept (-o) when the collective reduces; others print "none" in the redop column.
  virtual bool Reduces() const = 0;
  // Rooted collectives print -r's root in the root column; others print -1.
  virtual bool Rooted() const { return false; }
  // `count` = row bytes / element size.
  virtual CollSizes Sizes(size_t count, int nranks) const = 0;
  // busbw = algbw * factor; algbw = param_count * element size / time.
  virtual double BusBandwidthFactor(int nranks) const = 0;
  virtual braidResult_t Run(const void* send, void* recv, const CollSizes& sizes,
                            braidDataType_t type, braidRedOp_t op, int root,
                            braidComm_t comm) const = 0;
  virtual void InitData(const DataArgs& args) const = 0;
};

// Parses flags, initializes a communicator from the environment (braidCommInitEnv), runs the
// sweep and prints the table on rank 0. Returns the process exit status: 0, 1 if any element
// was wrong, 2 for bad flags, 3 if a braid call failed (after printing braidGetLastError).
int PerfMain(int argc, char** argv, const Collective& collective);

// ---- Output formatting (exposed for tests) ----------------------------------------------------

// nccl-tests' getFloatStr: fits `value` into `width` columns, with fewer decimals as it grows.
std::string FormatFloat(double value, int width);
// "#  Rank  0 Group  0 Pid   1165 on   hostname device -1 [cpu] host memory"
std::string FormatDeviceLine(int rank, int pid, const char* hostname);
// The three header lines (out-of-place / in-place banner, column names, units), each ending "\n".
std::string FormatTableHeader();
// "           8             2     float     sum      -1"
std::string FormatRowPrefix(size_t bytes, size_t count, const char* type, const char* op, int root);
// "     4.87    0.00    0.00       0"; wrong < 0 prints N/A (no check).
std::string FormatRowBody(double time_us, double algbw, double busbw, int64_t wrong);

}  // namespace braid::bench
