#include "bindings/c/group.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace braid::capi {
namespace {

struct QueuedOp {
  braidComm* comm;
  bool is_transfer;
  Communicator::PeerTransfer transfer;
  algorithms::CollectiveArgs args;
  bool on_device = false;  // device buffers, enqueued on `stream`
  void* stream = nullptr;
};

struct GroupState {
  int depth = 0;
  std::vector<QueuedOp> ops;
};

thread_local GroupState group;

// Runs one communicator's share of a group: transfers together, then collectives in order.
// Device work given several streams runs on the first of them, joined to the others
// (Communicator::JoinDeviceStreams: NCCL's semantics for a group over several streams).
Status RunForComm(braidComm* comm, const std::vector<QueuedOp>& ops) {
  std::vector<Communicator::PeerTransfer> transfers, device_transfers;
  std::vector<void*> streams;  // the device work's streams, in first-use order
  for (const QueuedOp& op : ops) {
    if (op.comm != comm) continue;
    if (op.on_device && std::find(streams.begin(), streams.end(), op.stream) == streams.end()) {
      streams.push_back(op.stream);
    }
    if (op.is_transfer) (op.on_device ? device_transfers : transfers).push_back(op.transfer);
  }
  if (!transfers.empty() && !device_transfers.empty()) {
    return Status::InvalidUsage("rank " + std::to_string(comm->impl->rank()) +
                                ": one group mixes sends/receives of host buffers and of device buffers on "
                                "one communicator; that is not supported yet (use two groups)");
  }
  void* primary = streams.empty() ? nullptr : streams[0];
  if (streams.size() > 1) BRAID_RETURN_IF_ERROR(comm->impl->JoinDeviceStreams(streams));
  if (!transfers.empty()) BRAID_RETURN_IF_ERROR(comm->impl->RunPointToPoint(transfers));
  if (!device_transfers.empty()) BRAID_RETURN_IF_ERROR(comm->impl->EnqueuePointToPoint(device_transfers, primary));
  for (const QueuedOp& op : ops) {
    if (op.comm != comm || op.is_transfer) continue;
    BRAID_RETURN_IF_ERROR(op.on_device ? comm->impl->EnqueueCollective(op.args, primary)
                                       : comm->impl->RunCollective(op.args));
  }
  if (streams.size() > 1) BRAID_RETURN_IF_ERROR(comm->impl->ReleaseDeviceStreams(streams));
  return Status::Ok();
}

}  // namespace

bool InGroup() { return group.depth > 0; }

Status GroupStart() {
  ++group.depth;
  return Status::Ok();
}

Status GroupEnd() {
  if (group.depth == 0) return Status::InvalidUsage("braidGroupEnd without a matching braidGroupStart");
  if (--group.depth > 0) return Status::Ok();
  std::vector<QueuedOp> ops;
  ops.swap(group.ops);
  std::vector<braidComm*> comms;
  for (const QueuedOp& op : ops) {
    bool seen = false;
    for (braidComm* c : comms) seen |= c == op.comm;
    if (!seen) comms.push_back(op.comm);
  }
  for (braidComm* comm : comms) {
    Status live = CheckComm(comm);  // destroyed while the group was open
    if (!live.ok()) return live;
  }
  if (comms.empty()) return Status::Ok();
  if (comms.size() == 1) {
    Status status = RunForComm(comms[0], ops);
    Report(comms[0], status);
    return status;
  }
  std::vector<Status> results(comms.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = RunForComm(comms[i], ops); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < comms.size(); ++i) {
    if (!results[i].ok()) {
      Report(comms[i], results[i]);
      return results[i];
    }
  }
  return Status::Ok();
}

Status SubmitCollective(braidComm* comm, const algorithms::CollectiveArgs& args) {
  if (!InGroup()) return comm->impl->RunCollective(args);
  group.ops.push_back(QueuedOp{comm, false, {}, args});
  return Status::Ok();
}

Status SubmitTransfer(braidComm* comm, const Communicator::PeerTransfer& transfer) {
  if (!InGroup()) return comm->impl->RunPointToPoint({transfer});
  group.ops.push_back(QueuedOp{comm, true, transfer, {}});
  return Status::Ok();
}

Status SubmitDeviceCollective(braidComm* comm, const algorithms::CollectiveArgs& args, void* stream) {
  if (!InGroup()) return comm->impl->EnqueueCollective(args, stream);
  group.ops.push_back(QueuedOp{comm, false, {}, args, true, stream});
  return Status::Ok();
}

Status SubmitDeviceTransfer(braidComm* comm, const Communicator::PeerTransfer& transfer, void* stream) {
  if (!InGroup()) return comm->impl->EnqueuePointToPoint({transfer}, stream);
  group.ops.push_back(QueuedOp{comm, true, transfer, {}, true, stream});
  return Status::Ok();
}

}  // namespace braid::capi
