// How one device-buffer operation maps onto pinned host staging memory: which device bytes are
// copied out before the host part runs, which are copied back after, and the host part itself,
// cut into steps that the device work queue pipelines.
//
// Why staging: the host transports (tcp, shm) and the host algorithms read and write host
// memory. A device-buffer collective is therefore run as: copy its inputs from the device into a
// staging buffer (on the communicator's stream), run the ordinary host collective in place on
// that buffer (on the progress thread), copy its outputs back (on the stream).
//
// Why steps: a large message is cut into steps of at most `chunk_bytes` of staging each
// (Config::device_chunk_bytes, BRAID_DEVICE_CHUNK_BYTES), and each step is the same host
// collective over its share, so the queue can copy the next step out and the previous one back
// while the host collective of this one is on the wire (device_work_queue.h). Every collective
// is cut by the layout it has: element range [a, b) of the message for allreduce, broadcast and
// reduce; the same range [a, b) of each of the n per-rank blocks for allgather, reducescatter,
// alltoall, gather and scatter (a step of those is the same collective with count b - a). An
// element never leaves its place, and every rank cuts the same way (the chunk size must be the
// same on every rank, as BRAID_ALGO must), so each step is one collective all ranks run.
// What a step changes: for reductions, each step's host collective picks its algorithm and
// reduces every element of its share as that algorithm does for a message of the step's size.
// Data movement is bitwise the same whatever the cut. A reduction is too where the operation is
// exact (integers) or the algorithm folds the ranks in one order for every element whatever its
// place (the direct allreduce and rd do by construction; device_path_test checks rhd too); the
// ring allreduce starts each segment's fold at another rank, so for floating point at 3 or more
// ranks the cut can change the last bits, as the message size (and so the algorithm) already
// does on the host path (docs/CUDA.md). chunk_bytes 0 stages the whole message as one step.
// Send/recv batches are cut per transfer: a transfer of more than `chunk_bytes` goes as pieces of
// `chunk_bytes` (the last shorter), and step j of the batch is the host batch of every transfer's
// piece j (transfers with fewer pieces drop out of later steps). Both ends of a transfer cut its
// bytes alike, so piece j meets piece j in step j of both ranks, and a step waits only for the
// same step of its peers. Counts that differ would no longer show as a size mismatch on the wire
// once both ends cut (the first pieces agree), so piece 0 of a cut transfer carries the
// transfer's byte count (kTransferHeaderBytes before the data) and the receiver checks it; a cut
// transfer meeting an uncut one differs in size on the wire as before.
//
// Layouts of one step (n ranks, m = b - a elements of E bytes, M = m * E; S = the step's slot):
//   allreduce      out send[a,b)->S[0,M)         host allreduce(S, S)            in S[0,M)->recv[a,b)
//   broadcast      root: send[a,b)->S[0,M)       host broadcast(root ? S : -, S) in S[0,M)->recv[a,b)
//   reduce         send[a,b)->S[0,M)             host reduce(S, root ? S : -)    root: S->recv[a,b)
//   allgather      send[a,b)->S[rM,(r+1)M)       host allgather(S+rM, S)         in S[pM..]->recv block p [a,b), every p
//   reducescatter  send block p [a,b)->S[pM..]   host reducescatter(S, S+rM)     in S[rM,(r+1)M)->recv[a,b)
//   alltoall       send block p [a,b)->S[pM..]   host alltoall(S, S)             in S[pM..]->recv block p [a,b)
//   gather         send[a,b)->S[rM,(r+1)M)       host gather(S+rM, root ? S : -) root: S[pM..]->recv block p
//   scatter        root: send block p->S[pM..]   host scatter(root ? S : -, S+rM) in S[rM,(r+1)M)->recv[a,b)
//   barrier        nothing                       host barrier
//   send/recv      piece j of each send -> slot  host batch over the pieces      slot->piece j of each recv
// Copies that are contiguous on both sides are merged (a single step's n slices are one copy).
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

// One step: its share of the message, staged into one slot of staging_bytes.
struct StagedStep {
  std::vector<StagedCopy> copy_out;  // device -> slot, on the stream, before the host part
  std::vector<StagedCopy> copy_in;   // slot -> device, on the stream, after it
  // The host part, on the progress thread, with the step's slot (null when staging_bytes is 0).
  std::function<Status(char* staging)> run_on_host;
};

struct StagedOp {
  std::string what;  // "allreduce of 1024 float32", for errors and logs
  size_t staging_bytes = 0;  // of the largest step: every slot of the operation has this many
  std::vector<StagedStep> steps;  // in order; at least one
};

// `args` as braid.h checked them (device buffers); `run` runs a host collective. Steps of at most
// `chunk_bytes` of staging (at least one element per block each); 0: one step.
using HostCollective = std::function<Status(const algorithms::CollectiveArgs&)>;
StagedOp StageCollective(const algorithms::CollectiveArgs& args, int rank, int size, size_t chunk_bytes,
                         HostCollective run);

// One send or receive of a point-to-point batch (Communicator::PeerTransfer's fields).
struct Transfer {
  bool is_send = true;
  int peer = 0;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t bytes = 0;
};
using HostTransfers = std::function<Status(const std::vector<Transfer>&)>;
// Bytes before the data of piece 0 of a transfer cut in pieces: the transfer's byte count.
constexpr size_t kTransferHeaderBytes = 8;
// Steps of each transfer's pieces of at most `chunk_bytes` (0: the whole batch in one step). A
// receive whose sender's count differs fails its step with a message naming both sizes.
StagedOp StageTransfers(const std::vector<Transfer>& transfers, size_t chunk_bytes, HostTransfers run);

}  // namespace braid::device_path
