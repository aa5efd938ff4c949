// Collectives and send/recv on DEVICE buffers through braid.h, checked against the serial
// references of tests/collectives/reference.h. Shared by the CI test on the simulated device
// (device_path_test.cc) and the GPU binary (tests/gpu/device_collectives_gpu_test.cc), which runs
// the very same checks on CUDA.
//
// Each check fills host images, copies them into device memory on the application's stream,
// calls braid with the device pointers and that stream WITHOUT synchronizing in between, copies
// the results back on the same stream, and only then synchronizes: so it checks the results and
// that the call is ordered after earlier work on the stream and before later work. A guard past
// every output must stay untouched; out of place, inputs must come back unchanged.
#pragma once

#include <string>

#include "bindings/c/braid.h"
#include "core/device/device.h"
#include "tests/collectives/collective_checks.h"

namespace braid::testing {

// Runs `call` on this rank with device buffers from `device` on `stream` (nullptr: the legacy
// default stream, as NCCL's NULL). "" or Describe(call) + what went wrong.
std::string RunDeviceCheck(braidComm_t comm, int rank, int size, const Call& call, device::Device& device,
                           device::Stream* stream);

// A ring of device-buffer sends and receives in one group (rank -> rank + 1), `count` elements.
std::string RunDeviceSendRecvRing(braidComm_t comm, int rank, int size, braidDataType_t type, size_t count,
                                  device::Device& device, device::Stream* stream);

// One group in which every rank sends every other rank a float32 message of a size of its own
// (1, a chunk less one, a chunk, a chunk and one, 3 chunks and 7, 8 chunks, with `chunk_elems`
// elements of BRAID_DEVICE_CHUNK_BYTES), so transfers of one batch are cut into different numbers
// of pieces; every element checked.
std::string RunDeviceUnevenBatch(braidComm_t comm, int rank, int size, size_t chunk_elems, device::Device& device,
                                 device::Stream* stream);

// One group over two streams of this rank (NCCL's semantics): an int32 allreduce on `a`, a ring
// send/recv on `b`. The send's input reaches b behind a hold lifted only after braidGroupEnd has
// returned, so the group's work must wait for b; each result is copied back on the other stream
// (the allreduce's on b, the receive's on a), so each stream must wait for the group's work.
std::string RunDeviceTwoStreamGroup(braidComm_t comm, int rank, int size, size_t count, device::Device& device,
                                    device::Stream& a, device::Stream& b);

// `ops` allreduces on separate device buffers enqueued back to back, one synchronize at the end:
// the queue runs them in order while the caller never waits.
std::string RunDeviceBackToBack(braidComm_t comm, int rank, int size, int ops, size_t count,
                                device::Device& device, device::Stream* stream);

// Every collective (in and out of place, rooted ones at the last rank) at `count` elements of
// float32 sum and int8 max, plus the send/recv ring and the back-to-back run. "" or the first
// failure.
std::string RunAllDeviceChecks(braidComm_t comm, int rank, int size, size_t count, device::Device& device,
                               device::Stream* stream);

// After a peer was lost during device work on `comm`: braidCommGetAsyncError says
// braidRemoteError, and the next call (an allreduce of 16 float32 on device buffer `d` on
// `native`) returns it with a message naming `lost` ("rank 1"). "" or what differs.
std::string CheckLossReported(braidComm_t comm, void* d, void* native, const std::string& lost);

// `stream` holds device work that waits for a peer that never comes: it is still blocked 300 ms
// later, braidCommAbort(comm) frees it within 5 s, and braidCommGetAsyncError then says
// braidAborted. "" or what differs.
std::string CheckAbortReleases(braidComm_t comm, device::Stream& stream);

}  // namespace braid::testing
