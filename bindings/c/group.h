// braidGroupStart / braidGroupEnd: operations issued between them are queued per thread and run
// together at the outermost GroupEnd, as with NCCL.
//
// Order inside a group does not matter to the user: for each communicator all point-to-point
// transfers are posted at once (so matched pairs never deadlock), then its collectives run in
// issue order. Several communicators in one group run concurrently, one thread each, so a group
// whose transfers depend on each other across communicators completes too.
#pragma once

#include "algorithms/collective.h"
#include "bindings/c/comm_handle.h"
#include "core/communicator.h"
#include "core/base/status.h"

namespace braid::capi {

bool InGroup();
Status GroupStart();
// Runs the queued operations when the outermost group closes.
Status GroupEnd();
// Inside a group: queue. Outside: run now.
Status SubmitCollective(braidComm* comm, const algorithms::CollectiveArgs& args);
Status SubmitTransfer(braidComm* comm, const Communicator::PeerTransfer& transfer);
// The same for device buffers on `stream` (core/device_path): enqueued, never waited for. In a
// group a communicator's device transfers are enqueued as one batch (so matched pairs never
// deadlock) and its device collectives in issue order, all on the first stream the group named
// for that communicator, joined to its other streams (NCCL's semantics for several streams); a
// group that mixes host and device transfers on one communicator is refused (kInvalidUsage: not
// supported yet).
Status SubmitDeviceCollective(braidComm* comm, const algorithms::CollectiveArgs& args, void* stream);
Status SubmitDeviceTransfer(braidComm* comm, const Communicator::PeerTransfer& transfer, void* stream);

}  // namespace braid::capi
