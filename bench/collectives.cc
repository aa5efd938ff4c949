#include "bench/collectives.h"

#include <cstring>

namespace braid::bench {
namespace {

double RingFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

size_t ElementSize(const DataArgs& a) { return TypeSize(a.type); }
char* At(void* buf, size_t elements, const DataArgs& a) {
  return static_cast<char*>(buf) + elements * ElementSize(a);
}
// A rank the call must leave alone expects its recvbuff as the call found it.
void ExpectUnchanged(const DataArgs& a) {
  std::memmove(a.expected, a.recv, a.sizes->recv_count * ElementSize(a));
}

// Count-per-rank shapes (nccl-tests' AllGather/Gather): each rank contributes count / n.
CollSizes GatherShape(size_t count, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  CollSizes s;
  s.param_count = s.send_count = count / n;
  s.recv_count = s.send_count * n;
  s.send_inplace_offset = s.send_count;  // sendbuff = recvbuff + rank * sendcount
  s.bw_count = s.recv_count;
  return s;
}
// ReduceScatter/Scatter: each rank receives count / n.
CollSizes ScatterShape(size_t count, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  CollSizes s;
  s.param_count = s.recv_count = count / n;
  s.send_count = s.recv_count * n;
  s.recv_inplace_offset = s.recv_count;  // recvbuff = sendbuff + rank * recvcount
  s.bw_count = s.send_count;
  return s;
}
CollSizes FlatShape(size_t count) {
  CollSizes s;
  s.send_count = s.recv_count = s.param_count = s.bw_count = count;
  return s;
}

class AllReduce : public Collective {
 public:
  const char* Name() const override { return "all_reduce_perf"; }
  const char* CallName() const override { return "braidAllReduce"; }
  bool Reduces() const override { return true; }
  CollSizes Sizes(size_t count, size_t, int) const override { return FlatShape(count); }
  // Each rank sends and receives (n-1)/n of the data twice (reduce-scatter, then allgather).
  double BusBandwidthFactor(int nranks) const override { return 2 * RingFactor(nranks); }
  bool PrintsMemoryBound() const override { return true; }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t op, int, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidAllReduce(send, recv, s.param_count, type, op, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    FillReduceInput(a.type, a.op, a.rank, a.seed, a.send, a.sizes->send_count);
    FillReduceExpected(a.type, a.op, a.nranks, a.seed, a.expected, a.sizes->recv_count);
  }
};

class AllGather : public Collective {
 public:
  const char* Name() const override { return "all_gather_perf"; }
  const char* CallName() const override { return "braidAllGather"; }
  bool Reduces() const override { return false; }
  CollSizes Sizes(size_t count, size_t, int nranks) const override {
    return GatherShape(count, nranks);
  }
  double BusBandwidthFactor(int nranks) const override { return RingFactor(nranks); }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t, int, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidAllGather(send, recv, s.param_count, type, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    const size_t n = a.sizes->send_count;
    FillRankData(a.type, a.rank, a.seed, a.send, n);
    for (int r = 0; r < a.nranks; ++r) {
      FillRankData(a.type, r, a.seed, At(a.expected, n * static_cast<size_t>(r), a), n);
    }
  }
};

class Broadcast : public Collective {
 public:
  const char* Name() const override { return "broadcast_perf"; }
  const char* CallName() const override { return "braidBroadcast"; }
  bool Reduces() const override { return false; }
  bool Rooted() const override { return true; }
  CollSizes Sizes(size_t count, size_t, int) const override { return FlatShape(count); }
  double BusBandwidthFactor(int) const override { return 1; }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t, int root, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidBroadcast(send, recv, s.param_count, type, root, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    if (a.rank == a.root) FillRankData(a.type, a.root, a.seed, a.send, a.sizes->send_count);
    FillRankData(a.type, a.root, a.seed, a.expected, a.sizes->recv_count);
  }
};

class Reduce : public Collective {
 public:
  const char* Name() const override { return "reduce_perf"; }
  const char* CallName() const override { return "braidReduce"; }
  bool Reduces() const override { return true; }
  bool Rooted() const override { return true; }
  CollSizes Sizes(size_t count, size_t, int) const override { return FlatShape(count); }
  double BusBandwidthFactor(int) const override { return 1; }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t op, int root, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidReduce(send, recv, s.param_count, type, op, root, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    FillReduceInput(a.type, a.op, a.rank, a.seed, a.send, a.sizes->send_count);
    if (a.rank == a.root) {
      FillReduceExpected(a.type, a.op, a.nranks, a.seed, a.expected, a.sizes->recv_count);
    } else {
      ExpectUnchanged(a);
    }
  }
};

class ReduceScatter : public Collective {
 public:
  const char* Name() const override { return "reduce_scatter_perf"; }
  const char* CallName() const override { return "braidReduceScatter"; }
  bool Reduces() const override { return true; }
  CollSizes Sizes(size_t count, size_t, int nranks) const override {
    return ScatterShape(count, nranks);
  }
  double BusBandwidthFactor(int nranks) const override { return RingFactor(nranks); }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t op, int, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidReduceScatter(send, recv, s.param_count, type, op, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    const size_t n = a.sizes->recv_count;
    FillReduceInput(a.type, a.op, a.rank, a.seed, a.send, a.sizes->send_count);
    FillReduceExpected(a.type, a.op, a.nranks, a.seed, a.expected, n,
                       n * static_cast<size_t>(a.rank));
  }
};

class AllToAll : public Collective {
 public:
  const char* Name() const override { return "alltoall_perf"; }
  const char* CallName() const override { return "braidAllToAll"; }
  bool Reduces() const override { return false; }
  // nccl-tests: count / n per peer, rounded down to a multiple of 16 bytes; in place is
  // sendbuff == recvbuff.
  CollSizes Sizes(size_t count, size_t elem, int nranks) const override {
    const size_t n = static_cast<size_t>(nranks);
    const size_t per_16 = elem < 16 ? 16 / elem : 1;
    CollSizes s;
    s.param_count = (count / n) / per_16 * per_16;
    s.send_count = s.recv_count = s.bw_count = s.param_count * n;
    return s;
  }
  double BusBandwidthFactor(int nranks) const override { return RingFactor(nranks); }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t, int, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidAllToAll(send, recv, s.param_count, type, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    const size_t n = a.sizes->param_count;
    for (int peer = 0; peer < a.nranks; ++peer) {
      const size_t at = n * static_cast<size_t>(peer);
      FillBlockData(a.type, a.rank, peer, a.seed, At(a.send, at, a), n);
      FillBlockData(a.type, peer, a.rank, a.seed, At(a.expected, at, a), n);
    }
  }
};

class Gather : public Collective {
 public:
  const char* Name() const override { return "gather_perf"; }
  const char* CallName() const override { return "braidGather"; }
  bool Reduces() const override { return false; }
  bool Rooted() const override { return true; }
  CollSizes Sizes(size_t count, size_t, int nranks) const override {
    return GatherShape(count, nranks);
  }
  double BusBandwidthFactor(int nranks) const override { return RingFactor(nranks); }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t, int root, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidGather(send, recv, s.param_count, type, root, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    const size_t n = a.sizes->send_count;
    FillRankData(a.type, a.rank, a.seed, a.send, n);
    if (a.rank != a.root) return ExpectUnchanged(a);
    for (int r = 0; r < a.nranks; ++r) {
      FillRankData(a.type, r, a.seed, At(a.expected, n * static_cast<size_t>(r), a), n);
    }
  }
};

class Scatter : public Collective {
 public:
  const char* Name() const override { return "scatter_perf"; }
  const char* CallName() const override { return "braidScatter"; }
  bool Reduces() const override { return false; }
  bool Rooted() const override { return true; }
  CollSizes Sizes(size_t count, size_t, int nranks) const override {
    return ScatterShape(count, nranks);
  }
  double BusBandwidthFactor(int nranks) const override { return RingFactor(nranks); }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t, int root, braidComm_t comm,
                    braidStream_t stream) const override {
    return braidScatter(send, recv, s.param_count, type, root, comm, stream);
  }
  void InitData(const DataArgs& a) const override {
    const size_t n = a.sizes->recv_count;
    if (a.rank == a.root) {
      for (int r = 0; r < a.nranks; ++r) {
        FillRankData(a.type, r, a.seed, At(a.send, n * static_cast<size_t>(r), a), n);
      }
    }
    FillRankData(a.type, a.rank, a.seed, a.expected, n);
  }
};

// Each rank sends to (rank + 1) % n and receives from (rank - 1) % n, in one group. In place
// (one buffer for both) is timed but not checked: a receive may land before the send has read
// the buffer, as nccl-tests says ("We don't support in-place sendrecv").
class SendRecv : public Collective {
 public:
  const char* Name() const override { return "sendrecv_perf"; }
  const char* CallName() const override { return "braidSend/braidRecv"; }
  bool Reduces() const override { return false; }
  bool ChecksInPlace() const override { return false; }
  CollSizes Sizes(size_t count, size_t, int) const override { return FlatShape(count); }
  double BusBandwidthFactor(int) const override { return 1; }
  braidResult_t Run(const void* send, void* recv, const CollSizes& s, braidDataType_t type,
                    braidRedOp_t, int, braidComm_t comm,
                    braidStream_t stream) const override {
    int rank = 0, nranks = 1;
    braidResult_t result = braidCommUserRank(comm, &rank);
    if (result == braidSuccess) result = braidCommCount(comm, &nranks);
    if (result != braidSuccess) return result;
    result = braidGroupStart();
    if (result != braidSuccess) return result;
    braidResult_t first =
        braidSend(send, s.param_count, type, (rank + 1) % nranks, comm, stream);
    const braidResult_t recv_result =
        braidRecv(recv, s.param_count, type, (rank - 1 + nranks) % nranks, comm, stream);
    if (first == braidSuccess) first = recv_result;
    const braidResult_t end = braidGroupEnd();  // always closes the group
    return first != braidSuccess ? first : end;
  }
  void InitData(const DataArgs& a) const override {
    FillRankData(a.type, a.rank, a.seed, a.send, a.sizes->send_count);
    FillRankData(a.type, (a.rank - 1 + a.nranks) % a.nranks, a.seed, a.expected,
                 a.sizes->recv_count);
  }
};

}  // namespace

const Collective& AllReduceCollective() { static const AllReduce c; return c; }
const Collective& AllGatherCollective() { static const AllGather c; return c; }
const Collective& BroadcastCollective() { static const Broadcast c; return c; }
const Collective& ReduceCollective() { static const Reduce c; return c; }
const Collective& ReduceScatterCollective() { static const ReduceScatter c; return c; }
const Collective& AllToAllCollective() { static const AllToAll c; return c; }
const Collective& GatherCollective() { static const Gather c; return c; }
const Collective& ScatterCollective() { static const Scatter c; return c; }
const Collective& SendRecvCollective() { static const SendRecv c; return c; }

std::vector<const Collective*> AllCollectives() {
  return {&AllReduceCollective(),     &AllGatherCollective(),  &BroadcastCollective(),
          &ReduceCollective(),        &ReduceScatterCollective(), &AllToAllCollective(),
          &GatherCollective(),        &ScatterCollective(),    &SendRecvCollective()};
}

}  // namespace braid::bench
