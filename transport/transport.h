// Transport: makes Connections between the ranks of one communicator.
//
// One Transport object exists per communicator and per transport kind. Transports are tried in
// registry order (shm > cuda_ipc > ibverbs > tcp; cuda_ipc first on device communicators, the only
// ones that have it: transport/registry.h); the first whose CanConnect() says yes for a
// pair links that pair, so a new transport is a new folder plus one registration line in
// transport/registry.cc.
#pragma once

#include <memory>
#include <string>

#include "core/base/config.h"
#include "core/base/deadline.h"
#include "core/base/status.h"
#include "transport/connection.h"

namespace braid::device {
class Device;  // core/device/device.h
}  // namespace braid::device

namespace braid::transport {

// What a transport knows about the communicator it serves.
struct TransportContext {
  int rank = 0;
  int size = 1;
  // Identifies the communicator; a handshake carrying another id is refused, so a connection
  // from another job or another communicator never gets mixed in.
  uint64_t comm_id = 0;
  // The communicator's secret (the unique id's token; BRAID_SECRET under env://): a connection
  // is made only between parties that prove they hold it. "" = no authentication (both sides).
  std::string secret;
  Config config;
  // The device whose buffers the communicator works on; null for a host-only communicator. Only
  // transports for device buffers (cuda_ipc) use it: with none they are not created at all.
  std::shared_ptr<device::Device> device;
};

// What ranks publish about themselves so others can decide how to reach them.
struct PeerInfo {
  int rank = 0;
  std::string host;     // hostname
  std::string boot_id;  // /proc/sys/kernel/random/boot_id: same kernel only if both match
  // The network namespace ("net:[inode]" of /proc/self/ns/net): ranks of one kernel in different
  // namespaces (containers, tests/multihost) cannot reach each other's abstract Unix sockets or
  // loopback, so they are on different hosts for every transport.
  std::string net_ns;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;
  // What peers need to reach this rank (for TCP "ip:port"); published through the store.
  virtual std::string LocalAddress() const = 0;
  // True if this transport can link `self` and `peer`. Must give the same answer on both sides.
  virtual bool CanConnect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  // Links this rank with `peer`, whose LocalAddress() is `peer_address`. Both ranks of the pair
  // call it (in any order, from the thread running the communicator); blocks until the link is
  // up or `deadline` passes (Code::kTimeout naming the peer). Code::kRemoteError says the peer
  // cannot be reached this way (nobody answers at its address from here: it is gone, or out of
  // this transport's reach although CanConnect said yes); both sides of the pair then see it,
  // and the caller tries the next transport that can connect them (core/link_pool.h).
  virtual Result<std::unique_ptr<Connection>> Connect(int peer, const std::string& peer_address,
                                                      Deadline deadline) = 0;
  // Whether this rank's Connect(peer) waits for the peer to dial it (the accepting side), rather
  // than dialing the peer's listener, which answers without the peer's thread taking part. On
  // the accepting side Connect with an already expired deadline claims a link the peer has made
  // or fails with kTimeout, leaving nothing behind: how a rank links with whichever peer dials it
  // first without waiting on the others (a receive from any rank). The default is the
  // convention of transport/handshake.h that tcp and shm follow: the lower rank of a pair dials.
  virtual bool AwaitsDial(int self, int peer) const { return peer < self; }
  // Fails every pending request of every connection with `reason` and refuses new ones; wakes all
  // waiters at once. Safe from any thread. Idempotent.
  virtual void Abort(const Status& reason) = 0;
};

}  // namespace braid::transport
