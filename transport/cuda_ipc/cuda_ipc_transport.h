// CudaIpcTransport: links GPU ranks of one host (the same GPU included) through device memory
// they map from each other, for communicators that work on device buffers.
//
// Selection: created only for a communicator whose TransportContext carries a device (host-only
// communicators never see it, so they keep exactly their transports); CanConnect says yes for
// peers with the same hostname, boot id and network namespace, as shm. It is registered after
// shm (transport/registry.cc), and the registry puts it first for device communicators.
//
// Link set-up, per pair: the lower rank dials the higher rank's abstract Unix socket
// (SOCK_SEQPACKET, the shm transport's socket helpers), and the two run the transports' one
// handshake (transport/handshake.h: communicator id, ranks, proof of the secret). Then each side
// makes an inbox for the peer (inbox.h: a staging ring from Device::AllocateShareable, cuMemCreate
// with POSIX descriptor handles on CUDA, and a host control block) and offers it: across
// processes the two descriptors travel with SCM_RIGHTS and the peer maps them (ImportFd:
// cuMemImportFromShareableHandle, cuMemMap, cuMemSetAccess; the control block by mmap and
// RegisterHost); threads of one process hand over the inbox object itself (CUDA refuses to
// import in the exporting process, and plain pointers serve). Both acknowledge, and the socket
// stays open as the link's liveness signal.
//
// Threads: an accept thread (handshakes, stashes links by peer rank until Connect claims them)
// and a progress thread that moves every link's data (cuda_ipc_connection.h) and watches their
// sockets for end of file. Lifetime: destroying the transport aborts every link; connections may
// outlive it and then fail every request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/device/device.h"
#include "transport/connection.h"
#include "transport/transport.h"

namespace braid::transport::cuda_ipc {

struct CudaIpcOptions {
  // Bytes of each direction's staging ring (rounded up to the device's granularity: 2 MiB on
  // CUDA). 4 MiB holds four 1 MiB pieces in flight.
  uint64_t ring_bytes = uint64_t{4} << 20;
  // A connected stranger that completes no handshake within this time is dropped.
  int64_t handshake_timeout_ms = 10 * 1000;
};

class CudaIpcTransport : public Transport {
 public:
  // Null (registry: "not available here") for a single rank or a context without a device.
  // Errors: socket errors.
  static Result<std::unique_ptr<CudaIpcTransport>> Create(const TransportContext& context,
                                                          const CudaIpcOptions& options = CudaIpcOptions());
  ~CudaIpcTransport() override;
  CudaIpcTransport(const CudaIpcTransport&) = delete;
  CudaIpcTransport& operator=(const CudaIpcTransport&) = delete;

  const char* name() const override { return "cuda_ipc"; }
  // The abstract socket name, "braid-cuda-ipc-<comm>-r<rank>-<pid>-<random>".
  std::string LocalAddress() const override;
  bool CanConnect(const PeerInfo& self, const PeerInfo& peer) const override;
  // Blocks until the link is up (handshake, inboxes offered, mapped and acknowledged both ways).
  // Errors: kTimeout naming the peer, kAborted after Abort, kRemoteError when the peer is gone,
  // refuses, or holds another secret, kInvalidArgument for a bad peer or address, the device's
  // errors when memory cannot be made or mapped. At most once per peer.
  Result<std::unique_ptr<Connection>> Connect(int peer, const std::string& peer_address, Deadline deadline) override;
  // Fails every pending and later request and Connect with kAborted carrying `reason`'s message
  // and stops listening. Safe from any thread; idempotent (the first reason wins).
  void Abort(const Status& reason) override;

  // For tests of the registry's transports on machines without a GPU (the conformance suite's
  // simulated-device variant): contexts without a device use this one (null: none again).
  static void SetDeviceForTesting(std::shared_ptr<device::Device> device);

  struct State;  // cuda_ipc_transport.cc

 private:
  explicit CudaIpcTransport(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace braid::transport::cuda_ipc
