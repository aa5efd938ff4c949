// reduce_scatter_perf: nccl-tests' reduce_scatter_perf over braid (host buffers). Flags, table and
// JSON as nccl-tests; sizes, bus bandwidth and checks are in bench/collectives.cc.
#include "bench/collectives.h"

int main(int argc, char** argv) {
  return braid::bench::PerfMain(argc, argv, braid::bench::ReduceScatterCollective());
}
