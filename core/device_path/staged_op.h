// How one device-buffer operation maps onto pinned host staging memory: which device bytes are
// copied out before the host part runs, which are copied back after, and the host part itself.
//
// Why staging: the host transports (tcp, shm) and the host algorithms read and write host
// memory. A device-buffer collective is therefore run as: copy its inputs from the device into
// one staging buffer (on the communicator's stream), run the ordinary host collective in place on
// that buffer (on the progress thread), copy its outputs back (on the stream). This is the first
// correct step the issue allows: the whole message is staged at once, not pipelined in chunks,
// and reductions run on the host (kernels/cpu inside the host algorithms), not as device kernels.
//
// Layouts (n ranks, B = count * element size; S = the staging buffer), chosen so that every host
// collective runs in place on S with NCCL's in-place offsets:
//   allreduce      out send->S[0,B)          host allreduce(S, S)           in S[0,B)->recv
//   broadcast      root: send->S[0,B)        host broadcast(root ? S : -, S) in S[0,B)->recv
//   reduce         send->S[0,B)              host reduce(S, root ? S : -)    root: S[0,B)->recv
//   allgather      send->S[rB,(r+1)B)        host allgather(S+rB, S)        in S[0,nB)->recv
//   reducescatter  send->S[0,nB)             host reducescatter(S, S+rB)    in S[rB,(r+1)B)->recv
//   alltoall       send->S[0,nB)             host alltoall(S, S)            in S[0,nB)->recv
//   gather         send->S[rB,(r+1)B)        host gather(S+rB, root ? S : -) root: S[0,nB)->recv
//   scatter        root: send->S[0,nB)       host scatter(root ? S : -, S+rB) in S[rB,(r+1)B)->recv
//   barrier        nothing                   host barrier
//   send/recv      each send -> its slot     host batch over the slots      each recv slot->recv
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "core/base/status.h"

namespace braid::device_path {

// One copy between a device buffer and staging bytes [offset, offset + bytes).
struct StagedCopy {
  void* device = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
};

struct StagedOp {
  std::string what;  // "allreduce of 1024 float32", for errors and logs
  size_t staging_bytes = 0;
  std::vector<StagedCopy> copy_out;  // device -> staging, on the stream, before the host part
  std::vector<StagedCopy> copy_in;   // staging -> device, on the stream, after it
  // The host part, on the progress thread, with the staging buffer (null when staging_bytes is 0).
  std::function<Status(char* staging)> run_on_host;
};

// `args` as braid.h checked them (device buffers); `run` runs a host collective.
using HostCollective = std::function<Status(const algorithms::CollectiveArgs&)>;
StagedOp StageCollective(const algorithms::CollectiveArgs& args, int rank, int size, HostCollective run);

// One send or receive of a point-to-point batch (Communicator::PeerTransfer's fields).
struct Transfer {
  bool is_send = true;
  int peer = 0;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t bytes = 0;
};
using HostTransfers = std::function<Status(const std::vector<Transfer>&)>;
StagedOp StageTransfers(const std::vector<Transfer>& transfers, HostTransfers run);

}  // namespace braid::device_path
