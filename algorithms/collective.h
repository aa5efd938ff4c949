// What one collective call asks for, independent of how it is carried out.
#pragma once

#include <cstddef>

#include "core/base/datatype.h"

namespace braid::algorithms {

enum class Collective : int {
  kAllReduce = 0,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kGather,
  kScatter,
  kBarrier,
};
constexpr int kNumCollectives = 9;

// "allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather",
// "scatter", "barrier" (the spelling BRAID_ALGO uses).
const char* CollectiveName(Collective kind);
bool ParseCollective(const char* name, Collective* out);

// `count` keeps NCCL's meaning for each collective:
//   allreduce, broadcast, reduce: elements of the whole buffer;
//   allgather, gather: elements each rank contributes (recvbuf holds size * count);
//   reducescatter, scatter: elements each rank receives (sendbuf holds size * count);
//   alltoall: elements sent to each peer (both buffers hold size * count);
//   barrier: unused.
// In place means sendbuf == recvbuf, except allgather / gather (sendbuf == recvbuf + rank*count)
// and reducescatter / scatter (recvbuf == sendbuf + rank*count), as in NCCL.
struct CollectiveArgs {
  Collective kind = Collective::kAllReduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  // broadcast, reduce, gather, scatter

  // Bytes of one rank's share as nccl-tests counts "size" (allgather: the whole recvbuf).
  size_t MessageBytes(int nranks) const {
    const size_t bytes = count * DataTypeSize(type);
    switch (kind) {
      case Collective::kAllGather:
      case Collective::kReduceScatter:
      case Collective::kAllToAll:
      case Collective::kGather:
      case Collective::kScatter:
        return bytes * static_cast<size_t>(nranks);
      case Collective::kBarrier:
        return 0;
      default:
        return bytes;
    }
  }
};

}  // namespace braid::algorithms
