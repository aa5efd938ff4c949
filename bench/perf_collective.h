// The collective under test: what one *_perf program measures (sizes, the braid call, bus-
// bandwidth factor, expected data), and the buffers of one rank for one row, laid out as
// nccl-tests lays them out in place and out of place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bindings/c/braid.h"

namespace braid::bench {

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
  // `stream`: NULL for host buffers (the call completes before returning), the rank's
  // cudaStream_t for device buffers (the call queues the collective on it and returns).
  virtual braidResult_t Run(const void* send, void* recv, const CollSizes& sizes,
                            braidDataType_t type, braidRedOp_t op, int root, braidComm_t comm,
                            braidStream_t stream) const = 0;
  // all_reduce_perf: rows of at least 64 MiB on device buffers print the memory bound of ranks
  // sharing a GPU (perf_runner.cc).
  virtual bool PrintsMemoryBound() const { return false; }
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

}  // namespace braid::bench
