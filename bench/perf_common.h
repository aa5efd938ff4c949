// The shared half of braid's nccl-tests-style *_perf programs, one header for all of it.
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
//
// One file per purpose:
//   perf_flags       the command line (PerfOptions, ParsePerfArgs, PerfUsage, ParseSize)
//   perf_types       datatype and op names and sizes; the bench's own float16 / bfloat16
//   perf_data        input patterns, expected results, CountWrong
//   perf_collective  the Collective interface and one rank's buffers for one row
//   perf_table       nccl-tests' table lines
//   perf_json        nccl-tests' JSON report (-J)
//   perf_runner      PerfMain: communicator, sweep, timing, checks, output
// None throws: failures are return values, and PerfMain turns them into exit statuses.
#pragma once

#include "bench/perf_collective.h"
#include "bench/perf_data.h"
#include "bench/perf_flags.h"
#include "bench/perf_json.h"
#include "bench/perf_runner.h"
#include "bench/perf_table.h"
#include "bench/perf_types.h"
