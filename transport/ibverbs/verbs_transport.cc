#include "transport/ibverbs/verbs_transport.h"

#include <cstdlib>
#include <cstring>

#include "core/base/logging.h"
#include "transport/tcp/tcp_transport.h"

namespace braid::transport::ibverbs {
namespace {

// The bootstrap links run under a communicator id of their own, so they can never be mistaken
// for the communicator's TCP links (or the reverse).
constexpr uint64_t kBootstrapIdSalt = 0x6962766572627374ULL;  // "ibverbst"

// BRAID_IB_REG_CACHE=0 turns the registration cache off.
bool RegistrationCacheEnabled() {
  const char* value = std::getenv("BRAID_IB_REG_CACHE");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace

Result<std::unique_ptr<VerbsTransport>> VerbsTransport::Create(const TransportContext& context) {
  if (context.size < 2) return std::unique_ptr<VerbsTransport>();
  BRAID_ASSIGN_OR_RETURN(IbConfig config, IbConfigFromEnvironment());
  Result<const VerbsApi*> api = ActiveVerbsApi();
  if (!api.ok()) {
    BRAID_LOG(kInfo, context.rank) << "ibverbs transport not available: "
                                   << api.status().message();
    return std::unique_ptr<VerbsTransport>();
  }
  std::string why_none;
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<VerbsDevice> device,
                         VerbsDevice::Open(*api.value(), config, &why_none));
  if (device == nullptr) {
    BRAID_LOG(kInfo, context.rank) << "ibverbs transport not available: " << why_none;
    return std::unique_ptr<VerbsTransport>();
  }
  TransportContext boot_context = context;
  boot_context.comm_id = context.comm_id ^ kBootstrapIdSalt;
  Result<std::unique_ptr<tcp::TcpTransport>> boot = tcp::TcpTransport::Create(boot_context);
  if (!boot.ok()) return boot.status().WithContext("starting the verbs bootstrap listener");
  BRAID_LOG(kInfo, context.rank) << "ibverbs transport on " << device->Describe() << " ("
                                 << api.value()->source << ")";
  return std::unique_ptr<VerbsTransport>(new VerbsTransport(
      context, config, std::move(device), std::unique_ptr<Transport>(std::move(boot.value()))));
}

VerbsTransport::VerbsTransport(const TransportContext& context, const IbConfig& config,
                               std::shared_ptr<VerbsDevice> device,
                               std::unique_ptr<Transport> bootstrap)
    : context_(context),
      config_(config),
      device_(std::move(device)),
      cache_(std::make_shared<RegistrationCache>(device_->api(), device_->pd(),
                                                 RegistrationCacheEnabled())),
      driver_(std::make_shared<VerbsDriver>(context.size)),
      bootstrap_(std::move(bootstrap)) {
  backstop_ = std::thread([driver = driver_] { driver->RunBackstop(); });
}

VerbsTransport::~VerbsTransport() {
  Abort(Status::Aborted("the verbs transport was destroyed"));
  driver_->Stop();
  backstop_.join();
}

std::string VerbsTransport::LocalAddress() const { return bootstrap_->LocalAddress(); }

bool VerbsTransport::CanConnect(const PeerInfo&, const PeerInfo&) const { return true; }

Result<std::unique_ptr<Connection>> VerbsTransport::Connect(int peer,
                                                            const std::string& peer_address,
                                                            Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_.ok()) return aborted_;
  }
  const std::string linking = "rank " + std::to_string(context_.rank) + ": linking with rank " +
                              std::to_string(peer) + " over verbs";
  Result<std::unique_ptr<Connection>> boot = bootstrap_->Connect(peer, peer_address, deadline);
  if (!boot.ok()) return boot.status().WithContext(linking + " (bootstrap link)");
  BRAID_ASSIGN_OR_RETURN(std::shared_ptr<VerbsLink> link,
                         VerbsLink::Create(device_, cache_, config_, context_.rank, peer));
  link->Start(std::move(boot.value()));  // finishes as it is driven (VerbsLink::Start)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_.ok()) return aborted_;
    driver_->Add(link);
  }
  driver_->Kick();  // the backstop drives the set-up even if nobody waits on this link yet
  BRAID_LOG(kTrace, context_.rank) << "verbs link to rank " << peer << " started: QPN "
                                   << link->local_info().qpn;
  return std::unique_ptr<Connection>(new VerbsConnection(std::move(link), driver_));
}

void VerbsTransport::Abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.ok()) aborted_ = reason.ok() ? Status::Aborted("aborted") : reason;
  }
  // The links first: once the bootstrap links close, a link probing its own would take the
  // abort for a lost peer. Their bootstrap links stay open until the bootstrap transport's own
  // abort closes them, which tells each peer why (tcp's goodbye) instead of only hanging up.
  driver_->FailAll(Status::Aborted(reason.message()));
  bootstrap_->Abort(reason);
}

}  // namespace braid::transport::ibverbs
