// all_reduce_perf: nccl-tests' all_reduce_perf over braid (host buffers). Flags and output as
// nccl-tests; see bench/perf_common.h.
#include "bench/perf_common.h"

namespace braid::bench {
namespace {

class AllReduce : public Collective {
 public:
  const char* Name() const override { return "all_reduce_perf"; }
  const char* CallName() const override { return "braidAllReduce"; }
  bool Reduces() const override { return true; }

  CollSizes Sizes(size_t count, int /*nranks*/) const override {
    CollSizes s;
    s.send_count = s.recv_count = s.param_count = count;
    return s;  // in place: sendbuff == recvbuff
  }

  // Each rank sends and receives (n-1)/n of the data twice (reduce-scatter, then allgather).
  double BusBandwidthFactor(int nranks) const override {
    return 2.0 * (nranks - 1) / nranks;
  }

  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t op, int /*root*/, braidComm_t comm) const override {
    return braidAllReduce(send, recv, s.param_count, type, op, comm, /*stream=*/nullptr);
  }

  void InitData(const DataArgs& a) const override {
    FillReduceInput(a.type, a.op, a.rank, a.seed, a.send, a.sizes->send_count);
    FillReduceExpected(a.type, a.op, a.nranks, a.seed, a.expected, a.sizes->recv_count);
  }
};

}  // namespace
}  // namespace braid::bench

int main(int argc, char** argv) {
  return braid::bench::PerfMain(argc, argv, braid::bench::AllReduce());
}
