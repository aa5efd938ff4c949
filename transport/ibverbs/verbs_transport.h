// VerbsTransport: links the ranks of one communicator with reliable-connected InfiniBand / RoCE
// queue pairs (verbs_connection.h has the data path and its flow control).
//
// Set-up of a pair: each rank publishes (through the store, as every transport does) the address
// of a bootstrap listener, a TCP transport of its own under a communicator id derived from the
// communicator's. The lower rank dials, the two run the shared authenticated handshake
// (transport/handshake.h) over that link, then exchange SetupInfo records (QPN, PSN, LID, GID,
// MTU, ring address and key: wire.h), move their QPs to RTR and RTS, and exchange a ready message
// so neither writes before the other's QP can receive. The bootstrap link stays open for the
// link's life: a peer whose process is gone closes it, which is how a lost peer is noticed.
//
// Availability: Create returns null (skipped by the registry, with an INFO line saying why) when
// libibverbs cannot be loaded, when there is no device or active port BRAID_IB_HCA selects, or for
// a one-rank communicator. Tests that install the verbs model (tests/transport/ibverbs/
// verbs_model.h) get the model's device instead; nothing else does.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/base/status.h"
#include "transport/ibverbs/device.h"
#include "transport/ibverbs/ib_config.h"
#include "transport/ibverbs/registration_cache.h"
#include "transport/ibverbs/verbs_connection.h"
#include "transport/transport.h"

namespace braid::transport::ibverbs {

class VerbsTransport : public Transport {
 public:
  // Errors: an unparsable BRAID_IB_* variable (kInvalidArgument naming it), a device that fails
  // to open, the bootstrap listener's errors. Null: verbs is not available here (see above).
  static Result<std::unique_ptr<VerbsTransport>> Create(const TransportContext& context);
  ~VerbsTransport() override;

  const char* name() const override { return "ibverbs"; }
  std::string LocalAddress() const override;
  // Verbs reaches every peer that has it (a peer without it publishes no address).
  bool CanConnect(const PeerInfo& self, const PeerInfo& peer) const override;
  // Blocks until the QPs of the pair are connected (see the top of the file). Errors: those of
  // the bootstrap link (kTimeout, kRemoteError "rank P is gone", a refused handshake), a peer of
  // another build (kInvalidUsage), verbs calls that fail (kSystemError), kAborted after Abort.
  Result<std::unique_ptr<Connection>> Connect(int peer, const std::string& peer_address,
                                              Deadline deadline) override;
  void Abort(const Status& reason) override;

  // The registration cache, for tests.
  const RegistrationCache& registration_cache() const { return *cache_; }

 private:
  VerbsTransport(const TransportContext& context, const IbConfig& config,
                 std::shared_ptr<VerbsDevice> device, std::unique_ptr<Transport> bootstrap);

  const TransportContext context_;
  const IbConfig config_;
  const std::shared_ptr<VerbsDevice> device_;
  const std::shared_ptr<RegistrationCache> cache_;  // after device_: released before it
  const std::shared_ptr<VerbsDriver> driver_;
  const std::unique_ptr<Transport> bootstrap_;
  std::thread backstop_;  // drives the links while a send is unfinished (verbs_connection.h)
  std::mutex mutex_;  // guards aborted_
  Status aborted_;
};

}  // namespace braid::transport::ibverbs
