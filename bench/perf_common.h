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
#include <cstdio>
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
  int blocking = 0;             // -z: 1 barrier after each collective; 2 accepted (calls block)
  int average = 1;              // -a: time across ranks: 0 rank 0, 1 avg, 2 min, 3 max
  std::vector<braidRedOp_t> ops{braidSum};            // -o (all: every op)
  std::vector<braidDataType_t> types{braidFloat32};   // -d (all: every type)
  std::string json_path;      // -J: nccl-tests' JSON report (rank 0 writes it); empty: none
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
// their own precision). `seed` varies the pattern between checks. FillReduceExpected writes
// the result's elements [first, first + count) (reduce-scatter checks one block of it).
void FillReduceInput(braidDataType_t type, braidRedOp_t op, int rank, uint64_t seed, void* buf,
                     size_t count);
void FillReduceExpected(braidDataType_t type, braidRedOp_t op, int nranks, uint64_t seed,
                        void* buf, size_t count, size_t first = 0);
// Non-reductions (broadcast, gathers, scatter, send/recv): element i of rank `rank`'s data.
// Values are small integers (exact in every type) from a hash of (rank, i, seed), so a block
// delivered to the wrong place or shifted by any number of elements shows up as wrong.
void FillRankData(braidDataType_t type, int rank, uint64_t seed, void* buf, size_t count);
// All-to-all: the block rank `src` sends to rank `dst`.
void FillBlockData(braidDataType_t type, int src, int dst, uint64_t seed, void* buf,
                   size_t count);

// Number of elements of `got` that differ from `expected`. Exact, except that floating avg
// allows 2 units in the last place (an implementation may scale by 1/n instead of dividing).
int64_t CountWrong(braidDataType_t type, braidRedOp_t op, const void* got, const void* expected,
                   size_t count);

// ---- The collective under test ----------------------------------------------------------------

// Element counts of one row, as nccl-tests' *GetCollByteCount: in-place runs use
// sendbuff = recvbuff + send_inplace_offset * rank, recvbuff += recv_inplace_offset * rank.
// bw_count is nccl-tests' *GetBw base: algbw = bw_count * element size / time (param_count for
// allreduce, broadcast, reduce, send/recv; param_count * nranks for the gathers, scatter,
// reduce-scatter and all-to-all, i.e. the whole buffer).
struct CollSizes {
  size_t send_count = 0;
  size_t recv_count = 0;
  size_t param_count = 0;  // the count argument of the braid call; the "count" column
  size_t send_inplace_offset = 0;
  size_t recv_inplace_offset = 0;
  size_t bw_count = 0;
};

struct DataArgs {
  braidDataType_t type;
  braidRedOp_t op;
  int root;
  int rank;
  int nranks;
  uint64_t seed;
  const CollSizes* sizes;
  void* send;            // send_count elements to fill (for in-place runs, inside recv)
  const void* recv;      // recv_count elements: recvbuff as the call will find it (poisoned,
                         // holding the in-place send data once `send` is filled)
  void* expected;        // recv_count elements: what recvbuff must hold afterwards on this rank
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
  // False where the in-place layout has no defined result (send/recv from and into one
  // buffer): the in-place column is timed, and its #wrong is N/A, as nccl-tests does.
  virtual bool ChecksInPlace() const { return true; }
  // `count` = row bytes / element size (nccl-tests' GetCollByteCount; `elem` is the element
  // size in bytes, which all-to-all's 16-byte rounding needs).
  virtual CollSizes Sizes(size_t count, size_t elem, int nranks) const = 0;
  // busbw = algbw * factor; algbw = bw_count * element size / time.
  virtual double BusBandwidthFactor(int nranks) const = 0;
  virtual braidResult_t Run(const void* send, void* recv, const CollSizes& sizes,
                            braidDataType_t type, braidRedOp_t op, int root,
                            braidComm_t comm) const = 0;
  // Fills args.send (rooted collectives: on the root only where only the root sends) and
  // args.expected. Ranks whose recvbuff the call must not touch (non-roots of reduce and gather)
  // expect it unchanged: copy args.recv after filling args.send.
  virtual void InitData(const DataArgs& args) const = 0;
};

// Buffers of one rank for one row, laid out as nccl-tests does: out of place, send at `send`
// and recv at `recv`; in place, send = recv + send_inplace_offset * rank and
// recv += recv_inplace_offset * rank. PrepareRank poisons the part of recv the row uses, lets
// the collective fill its send data and expected result, and returns the two pointers to pass
// to Collective::Run (and the recv pointer to check against `expected`).
struct RankBuffers {
  char* send;
  char* recv;
};
RankBuffers PrepareRank(const Collective& collective, const CollSizes& sizes,
                        braidDataType_t type, braidRedOp_t op, int root, int rank, int nranks,
                        uint64_t seed, bool in_place, char* send, char* recv, void* expected);
// Bytes the send and recv buffers of `rank` need for `sizes`, in place and out of place.
void BufferBytes(const CollSizes& sizes, size_t elem, int rank, size_t* send_bytes,
                 size_t* recv_bytes);

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

// ---- JSON report (-J), nccl-tests' format version 2 -------------------------------------------
// Keys as nccl-tests' src/util.cu writes them (its quirks included: booleans as the strings
// "true"/"false", the root as the table's "%6i" string), plus "collective" and "nranks".
// See docs/BENCHMARKS.md.

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
