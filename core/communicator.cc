#include "core/communicator.h"

#include "core/device_path/process_device.h"

#include <time.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/collective_context.h"
#include "algorithms/registry.h"
#include "algorithms/single_copy_choice.h"
#include "core/base/cpu_relax.h"
#include "core/base/logging.h"
#include "core/calibration_agreement.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/peer_table.h"
#include "rendezvous/prefix_store.h"
#include "transport/fault_injection.h"
#include "transport/registry.h"

namespace braid {
namespace {

// BRAID_TUNE as the selector's trial options.
algorithms::TrialOptions TrialsOf(const Config& config) {
  algorithms::TrialOptions trials;
  trials.enabled = config.tune > 0;
  if (config.tune == 2) {
    trials.margin = std::numeric_limits<double>::infinity();
    trials.min_ranks = 2;
  }
  return trials;
}

// The cost model of the slowest transport the job needs (the last in priority order that links
// rank 0 with some rank), so that every rank derives the same model from the same peer table and
// the same calibration (rank 0's) and therefore selects the same algorithm for every collective;
// with shared memory's step latency for hosts that run no more ranks than they have CPUs, or for
// ranks that take turns on them.
algorithms::LinkModel JobLinkModel(const algorithms::Calibration& calibration,
                                   const rendezvous::PeerTable& peers,
                                   const std::vector<std::unique_ptr<transport::Transport>>& transports) {
  // Per distinct identity rather than per rank (ranks of one identity get the same answer): the
  // lowest rank above 0 that has each.
  std::vector<int> first_rank(static_cast<size_t>(peers.distinct()), -1);
  for (int r = peers.size() - 1; r >= 1; --r) {
    first_rank[static_cast<size_t>(peers.identity_of(r))] = r;
  }
  int slowest = -1;
  for (int i = 0; i < peers.distinct(); ++i) {
    const int r = first_rank[static_cast<size_t>(i)];
    if (r < 0) continue;
    for (size_t t = 0; t < transports.size(); ++t) {
      const char* name = transports[t]->name();
      if (peers[0].AddressOf(name) != nullptr && peers[r].AddressOf(name) != nullptr &&
          transports[t]->CanConnect(PeerInfoOf(0, peers[0]), PeerInfoOf(r, peers[r]))) {
        slowest = std::max(slowest, static_cast<int>(t));
        break;
      }
    }
  }
  const rendezvous::HostLoad load = rendezvous::BusiestHost(peers);
  // The model also carries shared memory's numbers for the phases inside a host
  // (LinkModel::intra_host_*, set by Calibration::Model).
  return algorithms::DefaultLinkModel(calibration,
                                      slowest >= 0 ? transports[slowest]->name() : nullptr,
                                      load.oversubscribed, load.ranks_per_cpu);
}

// Which ranks share a host: one kernel and one network namespace (rendezvous::HostKey).
algorithms::HostTopology TopologyOf(const rendezvous::PeerTable& peers) {
  std::vector<std::string> identity_keys;
  identity_keys.reserve(static_cast<size_t>(peers.distinct()));
  for (int i = 0; i < peers.distinct(); ++i) {
    identity_keys.push_back(rendezvous::HostKey(peers.identity(i)));
  }
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(peers.size()));
  for (int r = 0; r < peers.size(); ++r) {
    keys.push_back(identity_keys[static_cast<size_t>(peers.identity_of(r))]);
  }
  return algorithms::HostTopology::FromHostKeys(keys);
}

// `link` with the job's shape, so the selector's cost functions see hosts x ranks per host.
algorithms::LinkModel WithHosts(algorithms::LinkModel link,
                                const algorithms::HostTopology& topology) {
  link.hosts = topology.hosts();
  link.ranks_per_host = topology.max_ranks_per_host();
  return link;
}

// How long a rank that saw a link close waits for the closing rank's root-cause record: well
// under a second, since a rank that broke writes it before closing its links (so it is normally
// there at the first look), and a dead rank never writes one.
constexpr int kCauseWaitMs = 300;
// The longest wait for the record of a peer that said it is working out its own cause.
constexpr int kCauseChainWaitMs = 3000;

// The peer whose link was lost, read from a transport's or a Connect's message ("connection to
// rank P lost", "connecting to rank P", "rank P is gone"); -1 if none is named.
int PeerOfLoss(const std::string& message, int self, int size) {
  auto number_after = [&](const std::string& lead) -> int {
    size_t at = message.find(lead);
    while (at != std::string::npos) {
      const char* digits = message.c_str() + at + lead.size();
      if (std::isdigit(static_cast<unsigned char>(*digits))) {
        const int peer = std::atoi(digits);
        if (peer != self && peer >= 0 && peer < size) return peer;
      }
      at = message.find(lead, at + 1);
    }
    return -1;
  };
  for (const char* lead : {"connection to rank ", "connecting to rank ", "waiting for rank "}) {
    const int peer = number_after(lead);
    if (peer >= 0) return peer;
  }
  const size_t gone = message.find(" is gone");
  if (gone != std::string::npos) {
    const size_t rank_word = message.rfind("rank ", gone);
    if (rank_word != std::string::npos) {
      const int peer = std::atoi(message.c_str() + rank_word + 5);
      if (peer != self && peer >= 0 && peer < size) return peer;
    }
  }
  return -1;
}

// A record field never holds the separators.
std::string Flatten(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n') c = ' ';
  }
  return text;
}

// The root-cause phrase of bad input: "rank 2 failed on bad input at allreduce #4 (invalid
// argument): datatype 42 is not a braidDataType_t (0..11)". CausesFromGoodbye reads the kind and
// the code back from its words.
std::string BadInputPhrase(int rank, const std::string& where, Code code, const std::string& what) {
  return "rank " + std::to_string(rank) + " failed on bad input at " + where +
         (code == Code::kInvalidUsage ? " (invalid usage): " : " (invalid argument): ") + what;
}

}  // namespace

// The record under cause/<rank>: "braid-cause 1" then one line per root cause, its fields
// separated by tabs: rank, kind, seen by, code, phrase.
std::string Communicator::SerializeCauses(const std::vector<Cause>& causes) {
  std::string out = "braid-cause 1\n";
  for (const Cause& c : causes) {
    out += std::to_string(c.rank) + "\t" + std::to_string(static_cast<int>(c.how)) + "\t" +
           std::to_string(c.seen_by) + "\t" + std::to_string(static_cast<int>(c.code)) + "\t" +
           Flatten(c.phrase) + "\n";
  }
  return out;
}

std::vector<Communicator::Cause> Communicator::ParseCauses(const std::string& record) {
  std::vector<Cause> causes;
  std::istringstream lines(record);
  std::string line;
  if (!std::getline(lines, line) || line != "braid-cause 1") return causes;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string rank, how, seen_by, code, phrase;
    if (!std::getline(fields, rank, '\t') || !std::getline(fields, how, '\t') ||
        !std::getline(fields, seen_by, '\t') || !std::getline(fields, code, '\t') ||
        !std::getline(fields, phrase)) {
      continue;
    }
    Cause c;
    c.rank = std::atoi(rank.c_str());
    c.how = static_cast<FailureKind>(std::atoi(how.c_str()));
    c.seen_by = std::atoi(seen_by.c_str());
    c.code = static_cast<Code>(std::atoi(code.c_str()));
    c.phrase = phrase;
    causes.push_back(std::move(c));
  }
  return causes;
}

namespace {

// The deadline of an operation that starts now: `timeout_ms` from now, read from the coarse
// monotonic clock. Why not Deadline::AfterMs: the precise clock read costs 20-40 ns on the
// development VM, a tenth of a small collective; the coarse one is the same clock as
// steady_clock's CLOCK_MONOTONIC, only updated once per kernel tick, so it reads up to one tick
// behind. Adding that tick back makes the deadline never earlier than the precise one, and at
// most a tick (a few milliseconds) later, which no timeout is tuned to.
Deadline OperationDeadline(int64_t timeout_ms) {
  static const int64_t tick_ns = [] {
    timespec resolution;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &resolution) != 0) return int64_t{-1};
    return static_cast<int64_t>(resolution.tv_sec) * 1'000'000'000 + resolution.tv_nsec;
  }();
  timespec now;
  if (tick_ns < 0 || clock_gettime(CLOCK_MONOTONIC_COARSE, &now) != 0) {
    return Deadline::AfterMs(timeout_ms);
  }
  const std::chrono::nanoseconds since_boot(static_cast<int64_t>(now.tv_sec) * 1'000'000'000 +
                                            now.tv_nsec + tick_ns);
  return Deadline(Deadline::Clock::time_point(
      std::chrono::duration_cast<Deadline::Clock::duration>(since_boot) +
      std::chrono::milliseconds(timeout_ms)));
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::Create(InitOptions options) {
  const Deadline deadline = Deadline::AfterMs(options.config.timeout_ms);
  const std::string who = "rank " + std::to_string(options.rank);
  auto policy = algorithms::AlgorithmPolicy::Parse(options.config.algo);
  if (!policy.ok()) return policy.status().WithContext(who);

  // Rank 0's calibration, unless the communicator inherits one (core/calibration_agreement.h).
  if (options.calibration == nullptr) {
    BRAID_RETURN_IF_ERROR(PublishCalibration(*options.store, options.rank, options.size, deadline));
  }
  const bool shared = options.shared_links != nullptr;
  std::shared_ptr<LinkPool> links = std::move(options.shared_links);
  std::vector<int> pool_ranks = std::move(options.pool_ranks);
  rendezvous::PeerTable peers;
  if (shared) {
    // Split with splitShare: the parent already knows how to reach every member.
    peers = links->peers().Subset(pool_ranks);
  } else {
    transport::TransportContext context;
    context.rank = options.rank;
    context.size = options.size;
    context.comm_id = options.comm_id;
    context.secret = options.secret;
    context.config = options.config;
    std::vector<std::unique_ptr<transport::Transport>> transports;
    if (options.size > 1) {
      // One copy or two for large shm messages between processes: this host's measurement.
      const algorithms::SingleCopyChoice single_copy = algorithms::ChooseShmSingleCopy(
          options.config.shm_single_copy_bytes, algorithms::ProcessCalibration(), options.size,
          algorithms::OnlineCpuCount());
      context.config.shm_single_copy_bytes = single_copy.min_bytes;
      BRAID_LOG(kInfo, options.rank) << "shm: large messages between processes of this host: "
                                     << algorithms::DescribeSingleCopy(single_copy.min_bytes)
                                     << "; " << single_copy.why;
      auto created = transport::CreateTransports(context);
      if (!created.ok()) return created.status().WithContext(who + ": creating transports");
      transports = std::move(created).value();
    }

    rendezvous::PeerRecord self = rendezvous::LocalPeerRecord();
    for (const auto& t : transports) self.addresses.emplace_back(t->name(), t->LocalAddress());
    // The peer table (identities); a peer's addresses are read when it is first linked.
    auto exchanged =
        rendezvous::ExchangePeerTable(*options.store, options.rank, options.size, self, deadline);
    if (!exchanged.ok()) return exchanged.status();
    peers = std::move(exchanged).value();
    links = std::make_shared<LinkPool>(options.rank, peers, std::move(transports),
                                       RecordsInStore(options.store));
    for (int r = 0; r < options.size; ++r) pool_ranks.push_back(r);
  }
  if (options.calibration == nullptr) {
    auto agreed = AgreedCalibration(*options.store, options.rank, options.size, deadline);
    if (!agreed.ok()) return agreed.status();
    options.calibration = std::move(agreed).value();
  }

  std::unique_ptr<Communicator> comm(new Communicator(std::move(options), std::move(peers),
                                                      std::move(links), std::move(pool_ranks),
                                                      std::move(policy).value()));
  // Connect the ring neighbours now, so an unreachable peer fails init rather than the first
  // collective; other links are made when first needed. A child sharing its parent's links skips
  // this: they are the parent's to make, and the pairs it needs are mostly linked already.
  if (comm->size_ > 1 && !shared) {
    std::lock_guard<LightLock> lock(comm->op_mutex_);
    std::lock_guard<std::mutex> lane(comm->links_->lane());
    for (int peer : {(comm->rank_ + 1) % comm->size_, (comm->rank_ - 1 + comm->size_) % comm->size_}) {
      auto connection = comm->GetConnection(peer, deadline);
      if (!connection.ok()) return connection.status();
    }
  }
  if (comm->size_ > 1 && comm->open_store_) {
    auto own_store = comm->open_store_();
    if (!own_store.ok()) return own_store.status().WithContext(who + ": opening the hang-diagnosis store connection");
    auto diagnosis = HangDiagnosis::Start(std::move(own_store).value(), comm->store_, comm->rank_,
                                          comm->size_, &comm->progress_);
    if (!diagnosis.ok()) return diagnosis.status();
    comm->diagnosis_ = std::move(diagnosis).value();
  }
  BRAID_LOG(kInfo, comm->rank_) << "communicator ready: " << comm->size_ << " ranks, comm id "
                                << std::hex << comm->comm_id_ << std::dec << ", cost model: latency "
                                << comm->selector_.link().latency_us << " us, bandwidth "
                                << comm->selector_.link().bandwidth_gbps << " GB/s, reduce "
                                << comm->selector_.link().reduce_gbps << " GB/s";
  if (comm->size_ > 1 && LogEnabled(LogLevel::kInfo)) {
    const algorithms::HostTopology& topology = comm->topology_;
    std::string here;
    for (int r : topology.ranks_on(topology.host_of(comm->rank_))) {
      here += (here.empty() ? "" : ",") + std::to_string(r);
    }
    BRAID_LOG(kInfo, comm->rank_) << "topology: " << topology.Describe()
                                  << "; ranks on this host: " << here;
    if (topology.hosts() > 1) {
      BRAID_LOG(kInfo, comm->rank_) << "two-level algorithms: "
                                    << algorithms::TwoLevelChoices(comm->selector_.policy(),
                                                                   comm->size_,
                                                                   comm->selector_.link());
      // Without a measured tcp entry the links between hosts are priced as loopback, about as
      // fast as shared memory, and the two-level allreduce rarely looks worth its extra phases.
      const auto& stated = comm->calibration_->values();
      if (stated.find("tcp") == stated.end()) {
        BRAID_LOG(kInfo, comm->rank_)
            << "the links between hosts are priced with tcp's built-in (loopback) numbers; "
               "`bench/calibrate --across-hosts --write` under braidrun measures them "
               "(docs/MULTIHOST.md)";
      }
    }
  }
  return comm;
}

Communicator::Communicator(InitOptions options, rendezvous::PeerTable peers,
                           std::shared_ptr<LinkPool> links, std::vector<int> pool_ranks,
                           algorithms::AlgorithmPolicy policy)
    : rank_(options.rank),
      size_(options.size),
      config_(std::move(options.config)),
      comm_id_(options.comm_id),
      secret_(std::move(options.secret)),
      store_(std::move(options.store)),
      peers_(std::move(peers)),
      topology_(TopologyOf(peers_)),
      links_(std::move(links)),
      pool_ranks_(std::move(pool_ranks)),
      calibration_(std::move(options.calibration)),
      selector_(size_, std::move(policy),
                WithHosts(JobLinkModel(*calibration_, peers_, links_->transports()), topology_),
                TrialsOf(config_)),
      store_address_(std::move(options.store_address)),
      store_host_rank_(options.store_host_rank),
      open_store_(std::move(options.open_store)) {
  connections_.assign(static_cast<size_t>(size_), nullptr);
  links_->AddCommunicator();
}

Communicator::~Communicator() {
  // The progress thread runs this communicator's operations: it stops (after what is queued)
  // before anything it uses goes.
  {
    std::lock_guard<std::mutex> lock(device_mutex_);
    // The direct path's work runs on the queue's stream, after the queue's earlier steps: it goes
    // first, while the queue's progress thread can still finish those.
    direct_live_.store(nullptr);
    direct_.reset();
    device_work_live_.store(nullptr);
    device_work_.reset();
    device_links_live_.store(nullptr);
    device_links_.reset();
  }
  links_->RemoveCommunicator();
}

// Caller holds op_mutex_, and links_->lane() while the pool is shared.
Result<transport::Connection*> Communicator::GetConnection(int peer, Deadline deadline) {
  if (__builtin_expect(OnDeviceLinks(), 0)) return GetDeviceConnection(peer, deadline, false);
  auto connection = links_->Get(pool_ranks_[peer], deadline);
  if (connection.ok()) connections_[peer] = connection.value();
  return connection;
}

// Caller holds op_mutex_, and links_->lane() while the pool is shared.
Result<transport::Connection*> Communicator::GetConnectionIfReady(int peer, Deadline deadline) {
  if (__builtin_expect(OnDeviceLinks(), 0)) return GetDeviceConnection(peer, deadline, true);
  auto connection = links_->GetIfReady(pool_ranks_[peer], deadline);
  if (connection.ok() && connection.value() != nullptr) connections_[peer] = connection.value();
  return connection;
}

namespace {
// The communicator whose device work this thread is running a host part of (set around each
// staged step on the progress thread), so its operations take the device links.
thread_local const Communicator* device_work_of = nullptr;

struct DeviceWorkScope {
  explicit DeviceWorkScope(const Communicator* comm) : previous(device_work_of) { device_work_of = comm; }
  ~DeviceWorkScope() { device_work_of = previous; }
  const Communicator* previous;
};
}  // namespace

bool Communicator::OnDeviceLinks() const {
  return device_links_live_.load(std::memory_order_relaxed) != nullptr && device_work_of == this;
}

// Caller holds op_mutex_ (and links_->lane() while that pool is shared).
Result<transport::Connection*> Communicator::GetDeviceConnection(int peer, Deadline deadline, bool if_ready) {
  // Both ranks of a pair decide alike: the transport's rule (same host) over the same records.
  const bool same_host = device_links_->transports().front()->CanConnect(PeerInfoOf(rank_, peers_[rank_]),
                                                                        PeerInfoOf(peer, peers_[peer]));
  Result<transport::Connection*> connection =
      same_host ? (if_ready ? device_links_->GetIfReady(peer, deadline) : device_links_->Get(peer, deadline))
                : (if_ready ? links_->GetIfReady(pool_ranks_[peer], deadline) : links_->Get(pool_ranks_[peer], deadline));
  if (connection.ok() && connection.value() != nullptr) device_connections_[peer] = connection.value();
  return connection;
}

void* Communicator::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void Communicator::Break(const Status& error) {
  bool application_abort = false;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!broken_.load()) {
      error_ = error;
      broken_.store(true);
    }
    application_abort = aborted_by_application_;
  }
  links_->Abort(error);
  if (LinkPool* device_links = device_links_live_.load()) device_links->Abort(error);
  // Direct device work waits only on its peers' flags, which a broken peer stops writing: release
  // this rank's waits now and tell the peers, rather than leave it to the deadline.
  if (auto* direct = direct_live_.load()) direct->ReleaseAll(rank_, application_abort);
}

Status Communicator::AsyncError() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return error_;
}

void Communicator::Abort() {
  Cause self;
  self.rank = rank_;
  self.how = FailureKind::kAborted;
  self.seen_by = rank_;
  self.code = Code::kAborted;
  self.phrase = "rank " + std::to_string(rank_) + " aborted (braidCommAbort called by the application)";
  Status broken_by;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (broken_.load()) {
      broken_by = error_;
    } else {
      aborted_by_application_ = true;
    }
  }
  if (!broken_by.ok()) {
    // Already broken (and its cause published); the abort only makes sure nothing waits.
    links_->Abort(broken_by);
    if (LinkPool* device_links = device_links_live_.load()) device_links->Abort(broken_by);
    if (auto* queue = device_work_live_.load()) queue->ReleaseAll();
    if (auto* direct = direct_live_.load()) direct->ReleaseAll(rank_, true);
    return;
  }
  // The record goes out before the links close, so a peer that sees them close reads "rank R
  // aborted" rather than guessing "gone". Why on a thread of its own with a bounded wait: the
  // store call takes the store client's lock, which an operation of this communicator may hold
  // (a hang diagnosis), and a lost store may take its connect timeout; an abort must not wait
  // for either. The thread owns what it uses (the store's shared_ptr, copies of the strings).
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> written = done->get_future();
  std::thread([store = store_, key = "cause/" + std::to_string(rank_),
               value = SerializeCauses({self}), done] {
    (void)store->Set(key, value, Deadline::AfterMs(2000));
    done->set_value();
  }).detach();
  (void)written.wait_for(std::chrono::milliseconds(500));
  Break(Status::Aborted(self.phrase));
  // After Break, so the abort is the recorded error: then every stream waiting on this
  // communicator's device work goes on at once.
  if (auto* queue = device_work_live_.load()) queue->ReleaseAll();
  if (auto* direct = direct_live_.load()) direct->ReleaseAll(rank_, true);
}

Status Communicator::FailOnBadInput(const Status& bad_input, const char* op, bool numbered) {
  if (size_ == 1) return bad_input;
  std::lock_guard<LightLock> lock(op_mutex_);
  const std::unique_lock<std::mutex> lane = HoldLaneIfShared();
  if (!CheckUsable().ok()) return bad_input;
  Cause self;
  self.rank = rank_;
  self.how = FailureKind::kBadInput;
  self.seen_by = rank_;
  self.code = bad_input.code();
  self.phrase = BadInputPhrase(
      rank_, numbered ? std::string(op) + " #" + std::to_string(next_sequence_) : std::string(op),
      self.code, bad_input.message());
  // Before Break closes the links, as for every breaking rank: a peer that sees them close reads
  // it, and one not linked to this rank reads it through its neighbours' records.
  (void)PublishCauses({self}, Deadline::AfterMs(1000));
  Break(Status(self.code, self.phrase));
  return AsyncError();
}

Result<std::unique_ptr<Communicator>> Communicator::Split(int color, int key, Config config) {
  const std::string who = "rank " + std::to_string(rank_);
  if (color < 0 && color != kNoColor) {
    return Status::InvalidArgument("color " + std::to_string(color) +
                                   " is negative (only BRAID_SPLIT_NOCOLOR = -1 may be)");
  }
  std::string space;
  {
    std::lock_guard<LightLock> lock(op_mutex_);
    // The same root-cause error as every other call on the broken communicator.
    if (broken_.load()) return AsyncError();
    if (finalized_) return Status::InvalidUsage(who + ": cannot split a finalized communicator");
    space = "split/" + std::to_string(splits_++);
  }
  const Deadline deadline = Deadline::AfterMs(config_.timeout_ms);
  // Everyone publishes (color, key); everyone reads everyone's.
  // The share flag travels too: members of a color that disagree would wait for each other in
  // different places (the store exchange of new transports, or none), so that is refused.
  BRAID_RETURN_IF_ERROR(store_->Set(space + "/" + std::to_string(rank_),
                                    std::to_string(color) + " " + std::to_string(key) + " " +
                                        (config.split_share ? "1" : "0"),
                                    deadline));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(space + "/" + std::to_string(r));
  auto values = store_->MultiGet(keys, deadline);
  if (!values.ok()) return values.status().WithContext(who + ": exchanging colors for a split");
  if (color == kNoColor) return std::unique_ptr<Communicator>();

  struct Member {
    int key;
    int parent_rank;
  };
  std::vector<Member> members;
  for (int r = 0; r < size_; ++r) {
    int their_color = 0, their_key = 0, their_share = 0;
    if (std::sscanf(values.value()[r].c_str(), "%d %d %d", &their_color, &their_key, &their_share) != 3) {
      return Status::RemoteError(who + ": rank " + std::to_string(r) + " published a malformed split entry");
    }
    if (their_color != color) continue;
    if ((their_share == 1) != config.split_share) {
      return Status::InvalidUsage(who + ": split of color " + std::to_string(color) + " with splitShare " +
                                  (config.split_share ? "1" : "0") + ", but rank " + std::to_string(r) +
                                  " of the same color passed splitShare " + std::to_string(their_share) +
                                  "; every member must pass the same value");
    }
    members.push_back({their_key, r});
  }
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.parent_rank < b.parent_rank;
  });
  InitOptions options;
  options.size = static_cast<int>(members.size());
  for (int i = 0; i < options.size; ++i) {
    if (members[i].parent_rank == rank_) options.rank = i;
  }
  if (config.split_share) {
    options.shared_links = links_;
    for (const Member& m : members) options.pool_ranks.push_back(pool_ranks_[m.parent_rank]);
  }
  options.config = std::move(config);
  options.calibration = calibration_;
  const std::string child_space = space + "/color" + std::to_string(color);
  options.comm_id = rendezvous::CommIdFromText(std::to_string(comm_id_) + "/" + child_space);
  options.secret = secret_;
  options.store = std::make_shared<rendezvous::PrefixStore>(store_, child_space);
  options.store_address = store_address_;
  for (int i = 0; i < options.size; ++i) {
    if (members[i].parent_rank == store_host_rank_) options.store_host_rank = i;
  }
  if (open_store_) {
    options.open_store = [open = open_store_, child_space]() -> Result<std::shared_ptr<rendezvous::Store>> {
      auto base = open();
      if (!base.ok()) return base.status();
      return std::shared_ptr<rendezvous::Store>(
          std::make_shared<rendezvous::PrefixStore>(std::move(base).value(), child_space));
    };
  }
  // A child that shares this communicator's links is made while no operation of this one is in
  // flight (op_mutex_): from then on the pool is shared and every operation on it takes the lane
  // (LinkPool::AddCommunicator says why the lane is skipped until then).
  std::unique_lock<LightLock> no_operation_in_flight(op_mutex_, std::defer_lock);
  if (options.shared_links != nullptr) no_operation_in_flight.lock();
  auto child = Create(std::move(options));
  if (no_operation_in_flight.owns_lock()) no_operation_in_flight.unlock();
  if (!child.ok()) return child.status().WithContext(who + ": creating the communicator of color " + std::to_string(color));
  BRAID_LOG(kInfo, rank_) << "split #" << space << ": color " << color << " key " << key
                          << " -> rank " << child.value()->rank() << " of " << child.value()->size()
                          << (child.value()->links_ == links_ ? ", sharing this communicator's links" : "");
  return child;
}

Status Communicator::Finalize() {
  // Queued device work completes first (NCCL's finalize flushes it); its errors are AsyncError.
  (void)WaitForDeviceWork();
  std::lock_guard<LightLock> lock(op_mutex_);
  finalized_ = true;
  return AsyncError();
}

Status Communicator::WhyUnusable() const {
  // Exactly the error that broke it, so the root cause stays the first thing every later call
  // (and braidCommGetAsyncError's last error) names.
  if (broken_.load()) return AsyncError();
  if (finalized_) {
    return Status::InvalidUsage("rank " + std::to_string(rank_) +
                                ": communicator was finalized; no new operations are accepted");
  }
  return Status::Ok();
}

Status Communicator::PublishCauses(const std::vector<Cause>& causes, Deadline deadline) {
  return store_->Set("cause/" + std::to_string(rank_), SerializeCauses(causes), deadline);
}

std::optional<Communicator::Cause> Communicator::StoreHostCause(const Status& store_error) const {
  if (store_error.ok() || store_host_rank_ < 0 || store_host_rank_ == rank_) return std::nullopt;
  // Not a timeout: a store that answers nothing at all (connection refused, reset) is gone, and
  // with it the process that hosted it.
  if (store_error.code() == Code::kTimeout) return std::nullopt;
  return Cause::Gone(store_host_rank_, rank_,
                     "rank " + std::to_string(store_host_rank_) + " is gone: the store at " +
                         (store_address_.empty() ? std::string("its address") : store_address_) +
                         " that it hosted no longer answers (seen by rank " +
                         std::to_string(rank_) + ")");
}

void Communicator::MergeRecordedCauses(std::vector<Cause>* causes, Status* store_error) {
  auto named = [causes](int r) {
    for (const Cause& c : *causes) {
      if (c.rank == r) return true;
    }
    return false;
  };
  const Deadline quick = Deadline::AfterMs(1000);
  // Links of this rank that are lost too are marked for everyone (lost/<r>): a second rank that
  // died at the same moment may be linked to nobody who saw it first, since its other peers may
  // have broken on the first victim's news before noticing their own loss. Probe only reports
  // (a link with a receive pending answers kInternalError, skipped), and the links are about to
  // be aborted, so whatever it moves is never read.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || connections_[r] == nullptr || named(r)) continue;
    auto probed = connections_[r]->Probe();
    if (!probed.ok() && probed.status().code() == Code::kRemoteError) {
      Status marked = store_->Set("lost/" + std::to_string(r), std::to_string(rank_), quick);
      if (!marked.ok()) {
        if (store_error->ok()) *store_error = marked;
        return;
      }
    }
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    // lost/<r> first: a link only closes after its rank wrote its record, so a rank seen lost
    // whose record is still missing afterwards died without one.
    auto lost = store_->Check({"lost/" + std::to_string(r)}, quick);
    if (!lost.ok()) {
      if (store_error->ok()) *store_error = lost.status();
      return;
    }
    auto recorded = store_->Check({"cause/" + std::to_string(r)}, quick);
    if (!recorded.ok()) {
      if (store_error->ok()) *store_error = recorded.status();
      return;
    }
    if (recorded.value()) {
      auto record = store_->Get("cause/" + std::to_string(r), quick);
      if (!record.ok()) continue;
      for (Cause& c : ParseCauses(record.value())) {
        if (!named(c.rank)) causes->push_back(std::move(c));
      }
    } else if (lost.value() && !named(r)) {
      auto seen = store_->Get("lost/" + std::to_string(r), quick);
      const int seen_by = seen.ok() ? std::atoi(seen.value().c_str()) : -1;
      causes->push_back(Cause::Gone(r, seen_by, "rank " + std::to_string(r) +
                                                    " is gone (seen by rank " +
                                                    std::to_string(seen_by) + ")"));
    }
  }
}

std::vector<Communicator::Cause> Communicator::AwaitRecord(int peer, int64_t wait_ms,
                                                           Status* store_error) {
  const std::string record_key = "cause/" + std::to_string(peer);
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::milliseconds(wait_ms);
  // A peer that is working out its own cause (explaining/<peer>, set when it started) may itself
  // be waiting on a third rank's record: its record comes once that wait is over, so wait for it
  // longer, up to kCauseChainWaitMs (chains of such waits overlap, they do not add up).
  const auto chain_until = start + std::chrono::milliseconds(kCauseChainWaitMs);
  bool peer_explaining = false;
  for (;;) {
    auto present = store_->Check({record_key}, Deadline::AfterMs(300));
    if (!present.ok()) {
      *store_error = present.status();
      return {};
    }
    if (present.value()) {
      auto record = store_->Get(record_key, Deadline::AfterMs(300));
      if (!record.ok()) {
        *store_error = record.status();
        return {};
      }
      return ParseCauses(record.value());
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= until && !peer_explaining && wait_ms > 0) {
      auto explaining = store_->Check({"explaining/" + std::to_string(peer)}, Deadline::AfterMs(300));
      peer_explaining = explaining.ok() && explaining.value();
    }
    if (now >= (peer_explaining ? chain_until : until)) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<Communicator::Cause> Communicator::CausesFromGoodbye(const std::string& text,
                                                                 int peer) const {
  std::vector<Cause> causes;
  // The lead is everything before "; rank R's own view: "; without one the peer was its own root.
  std::string lead = text;
  const size_t own = text.find("'s own view: ");
  if (own != std::string::npos) {
    const size_t cut = text.rfind("; rank ", own);
    if (cut != std::string::npos) lead = text.substr(0, cut);
  }
  // Phrases start with "rank N" and are separated by "; rank N" (a phrase may hold "; " itself,
  // as in a rank's state "idle; last entered ...").
  std::vector<std::string> phrases;
  size_t start = 0;
  for (size_t at = lead.find("; rank "); ; at = lead.find("; rank ", at + 1)) {
    if (at == std::string::npos) {
      phrases.push_back(lead.substr(start));
      break;
    }
    if (at + 7 < lead.size() && std::isdigit(static_cast<unsigned char>(lead[at + 7]))) {
      phrases.push_back(lead.substr(start, at - start));
      start = at + 2;
    }
  }
  for (const std::string& phrase : phrases) {
    Cause c;
    c.rank = phrase.rfind("rank ", 0) == 0 ? std::atoi(phrase.c_str() + 5) : peer;
    if (c.rank < 0 || c.rank >= size_) c.rank = peer;
    c.seen_by = peer;
    c.phrase = phrase;
    if (phrase.find(" is gone") != std::string::npos) {
      c.how = FailureKind::kGone;
      c.code = Code::kRemoteError;
    } else if (phrase.find(" aborted (braidCommAbort") != std::string::npos) {
      c.how = FailureKind::kAborted;
      c.code = Code::kAborted;
    } else if (phrase.find(" did not answer at ") != std::string::npos ||
               phrase.find(" had not reached ") != std::string::npos) {
      c.how = FailureKind::kTimedOut;
      c.code = Code::kTimeout;
    } else if (phrase.find(" failed on bad input at ") != std::string::npos) {
      c.how = FailureKind::kBadInput;
      c.code = phrase.find(" (invalid usage): ") != std::string::npos ? Code::kInvalidUsage
                                                                      : Code::kInvalidArgument;
    } else {
      c.how = FailureKind::kFailed;
      c.code = Code::kRemoteError;
      c.phrase = "rank " + std::to_string(peer) + " failed: " + phrase;
    }
    causes.push_back(std::move(c));
  }
  return causes;
}

std::vector<Communicator::Cause> Communicator::CausesAfterLostLink(const Status& status) {
  std::vector<Cause> causes;
  Status store_error;
  const int peer = PeerOfLoss(status.message(), rank_, size_);
  // The closing peer's goodbye (transport/tcp/wire.h, transport/shm/wire.h), if it sent one: it
  // is alive and broke for the reason it gives, so its record is in the store already (no wait),
  // and without the store the goodbye itself names the root.
  const std::string said = "closed the link and said why: ";
  const size_t goodbye_at = status.message().find(said);
  const bool goodbye = peer >= 0 && goodbye_at != std::string::npos;
  if (peer >= 0) {
    // Tell the others that this link closed (a peer that died leaves no record of its own).
    Status marked = store_->Set("lost/" + std::to_string(peer), std::to_string(rank_),
                                Deadline::AfterMs(300));
    if (!marked.ok()) store_error = marked;
    // The bounded wait: a peer that broke wrote its record before closing its links, so it is
    // normally there at the first look; a moment more covers a store slower than the link. A
    // peer that said goodbye broke (it did not die), so its record is there already.
    if (store_error.ok()) causes = AwaitRecord(peer, goodbye ? 0 : kCauseWaitMs, &store_error);
    if (causes.empty() && goodbye) {
      causes = CausesFromGoodbye(status.message().substr(goodbye_at + said.size()), peer);
    }
    if (causes.empty()) {
      std::optional<Cause> host = StoreHostCause(store_error);
      if (host) causes.push_back(*host);
      if (!host || host->rank != peer) {
        Cause gone = Cause::Gone(peer, rank_, "rank " + std::to_string(peer) +
                                                  " is gone (seen by rank " +
                                                  std::to_string(rank_) + ")");
        // Without the store, "gone" is a guess: the peer may have closed because of another.
        if (!store_error.ok()) {
          gone.phrase = "rank " + std::to_string(peer) + " closed its link to rank " +
                        std::to_string(rank_) + " and its cause cannot be read (" +
                        store_error.message() + ")";
        }
        causes.push_back(std::move(gone));
      }
    }
  }
  if (store_error.ok()) MergeRecordedCauses(&causes, &store_error);
  if (causes.empty()) {
    std::optional<Cause> host = StoreHostCause(store_error);
    if (host) causes.push_back(*host);
  }
  return causes;
}

Status Communicator::ExplainFailure(const Status& status, algorithms::TagSpace space,
                                    uint64_t sequence, const char* op) {
  const std::string me = "rank " + std::to_string(rank_);
  Status own = status;
  std::vector<Cause> causes;
  // Tells a peer waiting for this rank's record that it is coming (AwaitRecord).
  (void)store_->Set("explaining/" + std::to_string(rank_), "1", Deadline::AfterMs(300));
  bool aborted_here;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    aborted_here = aborted_by_application_;
  }
  if (aborted_here) {
    Cause self;
    self.rank = rank_;
    self.how = FailureKind::kAborted;
    self.seen_by = rank_;
    self.code = Code::kAborted;
    self.phrase = me + " aborted (braidCommAbort called by the application)";
    causes.push_back(std::move(self));
  } else if (status.code() == Code::kTimeout && diagnosis_ &&
             space != algorithms::TagSpace::kPointToPoint) {
    // Ask the others where they are, so the error names who is missing instead of guessing.
    const HangDiagnosis::Findings found = diagnosis_->Diagnose(sequence, op, 5000);
    own = Status::Timeout(status.message() + " [timed out after " +
                          std::to_string(config_.timeout_ms) + " ms; " + found.text + "]");
    const std::string here = std::string(op) + " #" + std::to_string(sequence);
    // A peer that broke first (its own timeout, usually) may have found more: its record first.
    Status store_error;
    MergeRecordedCauses(&causes, &store_error);
    auto named = [&causes](int r) {
      for (const Cause& c : causes) {
        if (c.rank == r) return true;
      }
      return false;
    };
    for (int r : found.silent) {
      if (named(r)) continue;
      Cause frozen;
      frozen.rank = r;
      frozen.how = FailureKind::kTimedOut;
      frozen.seen_by = rank_;
      frozen.code = Code::kTimeout;
      frozen.phrase = "rank " + std::to_string(r) + " did not answer at " + here +
                      " (frozen or gone?; seen by " + me + " after its " +
                      std::to_string(config_.timeout_ms) + " ms timeout)";
      causes.push_back(std::move(frozen));
    }
    if (found.silent.empty()) {
      for (const auto& [r, state] : found.behind) {
        if (named(r)) continue;
        Cause late;
        late.rank = r;
        late.how = FailureKind::kTimedOut;
        late.seen_by = rank_;
        late.code = Code::kTimeout;
        late.phrase = "rank " + std::to_string(r) + " had not reached " + here + " (" + state +
                      "; seen by " + me + " after its " + std::to_string(config_.timeout_ms) +
                      " ms timeout)";
        causes.push_back(std::move(late));
      }
    }
  } else if (status.code() == Code::kRemoteError) {
    causes = CausesAfterLostLink(status);
  } else if (status.code() == Code::kTimeout && space == algorithms::TagSpace::kPointToPoint) {
    // Only the two ranks of a pair take part, so there is nobody to ask: the peer whose side did
    // not complete is the one to look at.
    for (const char* lead : {" bytes from rank ", " bytes to rank "}) {
      const size_t at = status.message().find(lead);
      if (at == std::string::npos) continue;
      const int peer = std::atoi(status.message().c_str() + at + std::strlen(lead));
      if (peer < 0 || peer >= size_ || peer == rank_) continue;
      // The peer may be stuck on a third rank and time out a moment later itself (a ring of
      // sends and receives): its record, if it comes within the bounded wait, names the root.
      Status store_error;
      causes = AwaitRecord(peer, kCauseWaitMs, &store_error);
      if (!causes.empty()) break;
      Cause late;
      late.rank = peer;
      late.how = FailureKind::kTimedOut;
      late.seen_by = rank_;
      late.code = Code::kTimeout;
      late.phrase = "rank " + std::to_string(peer) + " did not complete its side of " + op +
                    " within the " + std::to_string(config_.timeout_ms) + " ms timeout (seen by " +
                    me + ")";
      causes.push_back(std::move(late));
      break;
    }
  }
  if (causes.empty()) {
    // This rank is the root: its own error says what happened (a timeout with nobody to blame, a
    // mismatch it found, a local failure).
    Cause self;
    self.rank = rank_;
    self.how = status.code() == Code::kTimeout   ? FailureKind::kTimedOut
               : status.code() == Code::kAborted ? FailureKind::kAborted
               : status.message().find("mismatch") != std::string::npos ? FailureKind::kBadInput
                                                                        : FailureKind::kFailed;
    self.seen_by = rank_;
    self.code = own.code();
    self.phrase = own.message();
    causes.push_back(self);
    (void)PublishCauses(causes, Deadline::AfterMs(1000));
    return own;
  }
  // Before Break closes the links: a peer that sees them close reads this.
  (void)PublishCauses(causes, Deadline::AfterMs(1000));
  std::string lead;
  for (const Cause& c : causes) lead += (lead.empty() ? "" : "; ") + c.phrase;
  return Status(causes.front().code, lead + "; " + me + "'s own view: " + own.message());
}

template <typename Body>
Status Communicator::RunOperation(algorithms::TagSpace space, uint64_t sequence, const char* op,
                                  Body body) {
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const Deadline deadline = OperationDeadline(config_.timeout_ms);
  // The context refers to these two for the length of the operation (FunctionRef owns nothing).
  const auto connection = [this, deadline](int peer) { return GetConnection(peer, deadline); };
  const auto scratch = [this](size_t bytes) { return Scratch(bytes); };
  const algorithms::CollectiveContext ctx{
      rank_, size_, algorithms::OperationSequence(space, sequence), config_.chunk_bytes, deadline,
      {__builtin_expect(OnDeviceLinks(), 0) ? device_connections_.data() : connections_.data(), connection},
      scratch,
      &topology_,
  };
  Status status = body(ctx);
  // Argument and usage errors are found before anything is sent; anything else may have left
  // messages in flight, so the communicator cannot be trusted any more.
  if (!status.ok() && status.code() != Code::kInvalidArgument &&
      status.code() != Code::kInvalidUsage) {
    status = ExplainFailure(status, space, sequence, op);
    Break(status);
    // The first error recorded (another thread's abort may have broken it first), so that this
    // call, every later call and braidCommGetAsyncError agree word for word.
    return AsyncError();
  }
  return status;
}

Status Communicator::RunInternal(const algorithms::CollectiveArgs& args, const char* algorithm,
                                 algorithms::TagSpace space, uint64_t sequence, const char* op) {
  const algorithms::Algorithm* chosen = algorithms::FindAlgorithm(args.kind, algorithm);
  if (chosen == nullptr) {
    return Status::Internal(std::string(op) + " needs the " + algorithm + " " +
                            algorithms::CollectiveName(args.kind));
  }
  return RunOperation(space, sequence, op, [&](const algorithms::CollectiveContext& ctx) {
    return chosen->run(ctx, args);
  });
}

Status Communicator::RunCollective(const algorithms::CollectiveArgs& args) {
  // One load on the host path. Device work queued: wait for it first (the progress thread, which
  // runs that work through here, never waits).
  if (__builtin_expect(device_work_live_.load(std::memory_order_acquire) != nullptr, 0)) {
    BRAID_RETURN_IF_ERROR(WaitForDeviceWork());
  }
  std::lock_guard<LightLock> lock(op_mutex_);
  // The argument check and the collective hold the lane together, so no operation of a
  // communicator sharing these links slips in between them.
  const std::unique_lock<std::mutex> lane = HoldLaneIfShared();
  BRAID_RETURN_IF_ERROR(CheckUsable());
  // Most calls repeat the previous call's arguments, whose algorithm is settled.
  const algorithms::Algorithm* algorithm = selector_.Settled(args);
  algorithms::AlgorithmTrials::Trial* trial = nullptr;
  if (algorithm == nullptr) {
    auto plan = selector_.Select(args);
    if (!plan.ok()) return plan.status().WithContext("rank " + std::to_string(rank_));
    algorithm = plan.value().algorithm;
    trial = plan.value().trial;
  }
  const uint64_t sequence = next_sequence_++;
  BRAID_LOG_TO(kInfo, kColl, rank_)
      << algorithms::CollectiveName(args.kind) << " #" << sequence << " count " << args.count << " "
      << DataTypeName(args.type) << " " << ReduceOpName(args.op) << " root " << args.root << " on "
      << size_ << " ranks: algorithm " << algorithm->name << (trial != nullptr ? " (trial)" : "");
  const char* name = algorithms::CollectiveName(args.kind);
  if (config_.check && size_ > 1) BRAID_RETURN_IF_ERROR(CompareAcrossRanks(args, sequence));
  progress_.Enter(sequence, name, args.MessageBytes(size_));
  const auto start = trial != nullptr ? std::chrono::steady_clock::now()
                                      : std::chrono::steady_clock::time_point();
  Status status = RunOperation(algorithms::TagSpace::kCollective, sequence, name,
                               [&](const algorithms::CollectiveContext& ctx) {
    return algorithm->run(ctx, args);
  });
  progress_.Leave();
  if (!status.ok() || trial == nullptr) return status;
  const std::chrono::duration<double, std::micro> elapsed =
      std::chrono::steady_clock::now() - start;
  return FinishTrialCall(args, trial, sequence, elapsed.count());
}

Status Communicator::FinishTrialCall(const algorithms::CollectiveArgs& args,
                                     algorithms::AlgorithmTrials::Trial* trial, uint64_t sequence,
                                     double elapsed_us) {
  const std::optional<std::array<double, 2>> local = selector_.RecordTrial(trial, elapsed_us);
  if (!local) return Status::Ok();
  // Every rank reaches the end of the round at the same call, so all join this sum.
  std::array<double, 2> summed{};
  algorithms::CollectiveArgs sum;
  sum.kind = algorithms::Collective::kAllReduce;
  sum.sendbuf = local->data();
  sum.recvbuf = summed.data();
  sum.count = summed.size();
  sum.type = DataType::kFloat64;
  sum.op = ReduceOp::kSum;
  // Its own tag space, apart from the collective's and BRAID_CHECK's.
  BRAID_RETURN_IF_ERROR(
      RunInternal(sum, "rd", algorithms::TagSpace::kTrial, sequence, "algorithm trial"));
  const algorithms::AlgorithmTrials::Verdict verdict = selector_.ConcludeTrial(trial, summed);
  BRAID_LOG_TO(kInfo, kTuning, rank_)
      << algorithms::CollectiveName(args.kind) << " count " << args.count << " "
      << DataTypeName(args.type) << " " << ReduceOpName(args.op) << " root " << args.root << " on "
      << size_ << " ranks: trial of " << trial->candidates[0]->name << " against "
      << trial->candidates[1]->name << ", blocks of " << verdict.block_calls
      << " calls, mean call summed over the ranks " << verdict.mean_us[0] << " against "
      << verdict.mean_us[1] << " us: "
      << (verdict.winner != nullptr
              ? std::string("settled on ") + verdict.winner->name
              : "another round, blocks of " + std::to_string(verdict.next_block_calls) + " calls");
  return Status::Ok();
}

namespace {

// What BRAID_CHECK compares across ranks: the call as each rank made it.
struct CallDescription {
  int32_t kind;
  int32_t type;
  int32_t op;
  int32_t root;
  uint64_t count;
};

std::string DescribeCall(const CallDescription& d) {
  auto kind = static_cast<algorithms::Collective>(d.kind);
  std::string out = std::string(algorithms::CollectiveName(kind)) + "(count " +
                    std::to_string(d.count) + ", " + DataTypeName(static_cast<DataType>(d.type));
  if (kind == algorithms::Collective::kAllReduce || kind == algorithms::Collective::kReduce ||
      kind == algorithms::Collective::kReduceScatter) {
    out += std::string(", ") + ReduceOpName(static_cast<ReduceOp>(d.op));
  }
  if (kind == algorithms::Collective::kBroadcast || kind == algorithms::Collective::kReduce ||
      kind == algorithms::Collective::kGather || kind == algorithms::Collective::kScatter) {
    out += ", root " + std::to_string(d.root);
  }
  return out + ")";
}

// "rank 3", or "ranks 0, 1, 4".
std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// The root causes of a mismatch BRAID_CHECK found on rank `rank` (`all`: every rank's call, in
// rank order): each rank whose call differs from the one more than half of the ranks made, as
// bad input. Why the majority: no rank can know which call the application meant, but a rank
// whose call differs from nearly everyone's is the one to look at. Without a majority (two
// ranks, an even split) nobody is singled out: every distinct call is listed with its ranks.
std::string MismatchCauses(const std::vector<CallDescription>& all, int rank, uint64_t sequence) {
  auto same = [&all](int a, int b) {
    return std::memcmp(&all[a], &all[b], sizeof(CallDescription)) == 0;
  };
  std::vector<std::vector<int>> makers;  // the ranks that made each distinct call
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    auto call = std::find_if(makers.begin(), makers.end(),
                             [&](const std::vector<int>& ranks) { return same(ranks[0], r); });
    if (call == makers.end()) {
      makers.push_back({r});
    } else {
      call->push_back(r);
    }
  }
  const std::string found = " (found by BRAID_CHECK on rank " + std::to_string(rank) + ")";
  const std::vector<int>& most = *std::max_element(
      makers.begin(), makers.end(),
      [](const std::vector<int>& a, const std::vector<int>& b) { return a.size() < b.size(); });
  if (2 * most.size() <= all.size()) {
    std::string calls;
    for (const std::vector<int>& ranks : makers) {
      calls += (calls.empty() ? "" : "; ") + RankList(ranks) + " called " +
               DescribeCall(all[ranks[0]]);
    }
    return "the ranks disagree about collective #" + std::to_string(sequence) +
           " and no call has a majority" + found + ": " + calls;
  }
  const CallDescription& meant = all[most[0]];
  const std::string where =
      std::string(algorithms::CollectiveName(static_cast<algorithms::Collective>(meant.kind))) +
      " #" + std::to_string(sequence);
  std::string causes;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (same(r, most[0])) continue;
    causes += (causes.empty() ? "" : "; ") +
              BadInputPhrase(r, where, Code::kInvalidUsage,
                             "it called " + DescribeCall(all[r]) + " where " + RankList(most) +
                                 " called " + DescribeCall(meant) + found);
  }
  return causes;
}

}  // namespace

Status Communicator::CompareAcrossRanks(const algorithms::CollectiveArgs& args, uint64_t sequence) {
  CallDescription mine{static_cast<int32_t>(args.kind), static_cast<int32_t>(args.type),
                       static_cast<int32_t>(args.op), args.root, args.count};
  std::vector<CallDescription> all(size_);
  algorithms::CollectiveArgs exchange;
  exchange.kind = algorithms::Collective::kAllGather;
  exchange.sendbuf = &mine;
  exchange.recvbuf = all.data();
  exchange.count = sizeof(CallDescription);
  exchange.type = DataType::kUint8;
  // Its own tag space, so the check never collides with the collective or point-to-point.
  BRAID_RETURN_IF_ERROR(RunInternal(exchange, "ring", algorithms::TagSpace::kCheck, sequence,
                                    "argument check"));
  for (int r = 0; r < size_; ++r) {
    if (std::memcmp(&all[r], &mine, sizeof(mine)) != 0) {
      // Every rank finds the same mismatch in the same exchange, so none waits and none breaks:
      // each leads with the odd rank(s) out, then says what it saw itself.
      const std::string me = "rank " + std::to_string(rank_);
      return Status::InvalidUsage(
          MismatchCauses(all, rank_, sequence) + "; " + me + "'s own view: " + me +
          ": BRAID_CHECK found mismatched collective #" + std::to_string(sequence) +
          ": this rank called " + DescribeCall(mine) + ", rank " + std::to_string(r) +
          " called " + DescribeCall(all[r]));
    }
  }
  return Status::Ok();
}

// Sends to this rank's own rank pair with its receives from itself, in order, by copying.
Status Communicator::CopyToSelf(const std::vector<PeerTransfer>& transfers) const {
  std::vector<const PeerTransfer*> sends, receives;
  for (const PeerTransfer& t : transfers) {
    if (t.peer == rank_) (t.is_send ? sends : receives).push_back(&t);
  }
  if (sends.size() != receives.size()) {
    return Status::InvalidUsage("rank " + std::to_string(rank_) + ": " + std::to_string(sends.size()) +
                                " send(s) to itself but " + std::to_string(receives.size()) +
                                " receive(s) from itself; self transfers must pair up inside one group");
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i]->bytes != receives[i]->bytes) {
      return Status::InvalidUsage("rank " + std::to_string(rank_) + ": send to itself of " +
                                  std::to_string(sends[i]->bytes) + " bytes meets a receive of " +
                                  std::to_string(receives[i]->bytes) + " bytes");
    }
    if (sends[i]->bytes > 0 && receives[i]->recvbuf != sends[i]->sendbuf) {
      std::memmove(receives[i]->recvbuf, sends[i]->sendbuf, sends[i]->bytes);
    }
  }
  return Status::Ok();
}

Status Communicator::RunPointToPoint(const std::vector<PeerTransfer>& transfers) {
  // One load on the host path. Device work queued: wait for it first (the progress thread, which
  // runs that work through here, never waits).
  if (__builtin_expect(device_work_live_.load(std::memory_order_acquire) != nullptr, 0)) {
    BRAID_RETURN_IF_ERROR(WaitForDeviceWork());
  }
  std::lock_guard<LightLock> lock(op_mutex_);
  const std::unique_lock<std::mutex> lane = HoldLaneIfShared();
  // Point-to-point batches are not numbered: their tags count the messages of each pair.
  return RunOperation(algorithms::TagSpace::kPointToPoint, 0, "send/recv",
                      [&](const algorithms::CollectiveContext& ctx) -> Status {
    std::vector<std::pair<transport::RequestPtr, const PeerTransfer*>> posted;
    BRAID_RETURN_IF_ERROR(CopyToSelf(transfers));
    // Receives first, so data that arrives early lands in place.
    for (bool sends : {false, true}) {
      for (const PeerTransfer& t : transfers) {
        if (t.is_send != sends || t.peer == rank_) continue;
        auto connection = ctx.connection(t.peer);
        if (!connection.ok()) return connection.status();
        if (t.is_send) {
          const uint64_t tag = algorithms::PointToPointTag(sends_to_[t.peer]++);
          posted.emplace_back(connection.value()->PostSend(t.sendbuf, t.bytes, tag), &t);
        } else {
          const uint64_t tag = algorithms::PointToPointTag(receives_from_[t.peer]++);
          posted.emplace_back(connection.value()->PostRecv(t.recvbuf, t.bytes, tag), &t);
        }
      }
    }
    for (auto& [request, t] : posted) {
      Status status = request->Wait(ctx.deadline);
      if (!status.ok()) {
        return status.WithContext("rank " + std::to_string(rank_) + ": " +
                                  (t->is_send ? "send of " : "receive of ") +
                                  std::to_string(t->bytes) + " bytes " +
                                  (t->is_send ? "to" : "from") + " rank " + std::to_string(t->peer));
      }
    }
    return Status::Ok();
  });
}

Status Communicator::ReceiveFromAny(void* buf, size_t bytes, int* from) {
  BRAID_RETURN_IF_ERROR(WaitForDeviceWork());
  std::lock_guard<LightLock> lock(op_mutex_);
  const std::unique_lock<std::mutex> lane = HoldLaneIfShared();
  const std::string who = "rank " + std::to_string(rank_);
  const std::string what = who + ": receive of " + std::to_string(bytes) + " bytes from any rank";
  if (size_ == 1) {
    BRAID_RETURN_IF_ERROR(CheckUsable());
    return Status::InvalidUsage(what + ": the communicator has no other rank to send it");
  }
  return RunOperation(algorithms::TagSpace::kPointToPoint, 0, "receive from any rank",
                      [&](const algorithms::CollectiveContext& ctx) -> Status {
    // The peers whose next message may be this one, in polling order (round-robin across calls,
    // so a busy sender does not starve the others).
    std::vector<int> candidates;
    for (int i = 0; i < size_; ++i) {
      const int p = (any_source_turn_ + i) % size_;
      if (p != rank_) candidates.push_back(p);
    }
    std::string moved_on;  // peers dropped because their next message is a collective's
    // Peers dropped because their link is lost (they exited, were killed or closed it) and
    // nothing they sent before is left to receive: what their probe or link said, by rank.
    std::vector<std::pair<int, Status>> lost;
    // Why: a peer that sent and then left is still a sender until its last message is taken
    // (braidRecv from it would get them; the transports hand over what landed before they report
    // the loss), and one that left with nothing more to give can never be the sender, so it is
    // no reason to fail a receive that another rank may still answer.
    auto is_loss = [](const Status& status) { return status.code() == Code::kRemoteError; };
    const auto start = std::chrono::steady_clock::now();
    auto phase_start = start;
    auto next_link_try = start;  // unlinked peers that must dial us are asked about this often
    for (int round = 0;; ++round) {
      const auto now = std::chrono::steady_clock::now();
      const bool try_links = now >= next_link_try;
      if (try_links) next_link_try = now + std::chrono::milliseconds(1);
      bool arrived_elsewhere = false;  // something changed: stay in the spin phase
      for (size_t i = 0; i < candidates.size();) {
        const int p = candidates[i];
        transport::Connection* link = connections_[p];
        if (link == nullptr) {
          if (!try_links) {
            ++i;
            continue;
          }
          auto made = GetConnectionIfReady(p, ctx.deadline);
          if (!made.ok() && is_loss(made.status())) {
            // Gone before a link was made (so nothing of it is waiting here either).
            lost.emplace_back(p, made.status());
            candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(i));
            arrived_elsewhere = true;
            continue;
          }
          if (!made.ok()) return made.status().WithContext(what);
          link = made.value();
          if (link == nullptr) {
            ++i;
            continue;
          }
          arrived_elsewhere = true;
        }
        auto probed = link->Probe();
        if (!probed.ok() && is_loss(probed.status())) {
          // The link reports its loss only once everything that landed before it was taken.
          lost.emplace_back(p, probed.status());
          candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(i));
          arrived_elsewhere = true;
          continue;
        }
        if (!probed.ok()) {
          return probed.status().WithContext(what + ": waiting for rank " + std::to_string(p));
        }
        if (!probed.value()) {
          ++i;
          continue;
        }
        const transport::Connection::Incoming next = *probed.value();
        const uint64_t tag = algorithms::PointToPointTag(receives_from_[p]);
        if (next.tag != tag) {
          if (algorithms::SpaceOf(next.tag) == algorithms::TagSpace::kPointToPoint) {
            return Status::Internal(
                what + ": the next message from rank " + std::to_string(p) +
                " is its point-to-point message #" +
                std::to_string(next.tag & algorithms::kTagPointToPointCountMask) +
                " to this rank, but #" +
                std::to_string(tag & algorithms::kTagPointToPointCountMask) +
                " was expected (the pair is out of step)");
          }
          // Its next message belongs to an operation this rank has not entered yet, so nothing
          // point-to-point can come from it before this call ends.
          moved_on += (moved_on.empty() ? "" : ", ") + std::to_string(p);
          candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(i));
          arrived_elsewhere = true;
          continue;
        }
        if (next.bytes != bytes) {
          // Nothing was received: the message stays for a receive of its size.
          return Status::InvalidUsage(what + ": the next message from rank " + std::to_string(p) +
                                      " has " + std::to_string(next.bytes) + " bytes, not " +
                                      std::to_string(bytes) + " (it is left for a receive of " +
                                      "its size)");
        }
        ++receives_from_[p];
        Status status = link->PostRecv(buf, bytes, tag)->Wait(ctx.deadline);
        if (!status.ok()) {
          return status.WithContext(who + ": receive of " + std::to_string(bytes) +
                                    " bytes from rank " + std::to_string(p) +
                                    " (the first to send to a receive from any rank)");
        }
        *from = p;
        any_source_turn_ = (p + 1) % size_;
        return Status::Ok();
      }
      if (candidates.empty() && !lost.empty()) {
        // Every rank that could send it is gone (or has gone on to a collective) and nothing of
        // theirs is left: name each lost one with what its link said.
        std::string why;
        for (const auto& [p, status] : lost) {
          why += (why.empty() ? "" : "; ") + std::string("waiting for rank ") + std::to_string(p) +
                 ": " + status.message();
        }
        if (!moved_on.empty()) {
          why += "; the next message of rank(s) " + moved_on +
                 " to this one belongs to a collective this rank has not entered";
        }
        return Status::RemoteError(what + ": no other rank is left to send it, and nothing they "
                                   "sent is left to receive: " + why);
      }
      if (candidates.empty()) {
        return Status::InvalidUsage(what + ": the next message of every other rank to this one "
                                    "belongs to a collective this rank has not entered (ranks " +
                                    moved_on + "), so no point-to-point message can arrive");
      }
      if (broken_.load()) return AsyncError().WithContext(what);
      if (ctx.deadline.Expired()) {
        std::string waited;
        for (int p : candidates) waited += (waited.empty() ? "" : ", ") + std::to_string(p);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start).count();
        std::string gone;
        for (const auto& entry : lost) {
          gone += (gone.empty() ? "" : ", ") + std::to_string(entry.first);
        }
        if (!gone.empty()) gone = " (rank(s) " + gone + " lost, nothing left from them)";
        return Status::Timeout(what + ": no point-to-point message from rank(s) " + waited +
                               " within " + std::to_string(ms) + " ms" + gone);
      }
      // Spin, then yield, then nap, as the transports' waits do (a peer about to send answers
      // within microseconds; one that is not running needs the core).
      if (arrived_elsewhere) phase_start = std::chrono::steady_clock::now();
      const auto idle = std::chrono::steady_clock::now() - phase_start;
      if (idle < std::chrono::microseconds(50)) {
        CpuRelax();
      } else if (idle < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
      } else {
        const auto nap = std::min<std::chrono::steady_clock::duration>(
            idle / 16, std::chrono::milliseconds(1));
        std::this_thread::sleep_for(nap);
      }
    }
  });
}

}  // namespace braid

namespace braid {

Result<device_path::DeviceWorkQueue*> Communicator::DeviceWorkLocked() {
  if (device_work_ != nullptr) return device_work_.get();
  BRAID_ASSIGN_OR_RETURN(device::Device* device, device_path::ProcessDevice());
  BRAID_RETURN_IF_ERROR(MakeDeviceLinksLocked(device));
  device_path::DeviceWorkQueue::Options options;
  options.rank = rank_;
  options.timeout_ms = config_.timeout_ms;
  options.fail = [this](const Status& error) {
    // A failure in flight has broken the communicator already (its error, with its root cause,
    // stays); anything else becomes the error now, or nobody would hear of it.
    if (broken_.load()) return;
    Break(error.WithContext("device work"));
  };
  auto made = device_path::DeviceWorkQueue::Create(device, std::move(options));
  if (!made.ok()) return made.status();
  device_work_ = std::move(made).value();
  device_work_live_.store(device_work_.get(), std::memory_order_release);
  cu_device_.store(device->Ordinal(), std::memory_order_release);
  BRAID_LOG(kInfo, rank_) << "device path: own stream on " << device->Describe()
                          << ", progress thread started (pinned staging over "
                          << (device_links_ != nullptr ? "cuda_ipc to this host's ranks, the host transports beyond"
                                                       : "the host transports")
                          << ")";
  return device_work_.get();
}

Result<device_path::DirectCollectives*> Communicator::DirectLocked(device::Device* device) {
  if (direct_choice_ == DirectChoice::kDirect) return direct_.get();
  if (direct_choice_ == DirectChoice::kStaged) return nullptr;
  // Every input below is the same on every rank (the peer table, the configuration the job must
  // agree on), so every rank decides alike.
  std::string why_not;
  if (config_.device_algo == "staged") why_not = "BRAID_DEVICE_ALGO=staged";
  if (why_not.empty() && (size_ < 2 || size_ > device_path::DirectFlagBlock::kMaxRanks)) {
    why_not = std::to_string(size_) + " ranks (it takes 2 to " +
              std::to_string(device_path::DirectFlagBlock::kMaxRanks) + ")";
  }
  if (why_not.empty() && device_links_ == nullptr) why_not = "cuda_ipc is not allowed (BRAID_TRANSPORTS) or not available";
  if (why_not.empty()) {
    const transport::Transport& cuda_ipc = *device_links_->transports().front();
    for (int r = 0; r < size_ && why_not.empty(); ++r) {
      if (!cuda_ipc.CanConnect(PeerInfoOf(rank_, peers_[rank_]), PeerInfoOf(r, peers_[r]))) {
        why_not = "rank " + std::to_string(r) + " is on another host";
      }
    }
  }
  if (!why_not.empty()) {
    direct_choice_ = DirectChoice::kStaged;
    BRAID_LOG(kInfo, rank_) << "device path: collectives staged through pinned host memory, not direct: " << why_not;
    return nullptr;
  }
  device_path::DirectPeers::Options peers_options;
  peers_options.rank = rank_;
  peers_options.size = size_;
  peers_options.comm_id = comm_id_;
  peers_options.slot_bytes = device_path::DirectCollectives::kSlotBytes;
  peers_options.slots = device_path::DirectCollectives::kSlots;
  peers_options.publish = [this](const std::string& key, const std::string& value) {
    return store_->Set(key, value, Deadline::AfterMs(config_.timeout_ms));
  };
  peers_options.read = [this](const std::string& key, Deadline deadline) { return store_->Get(key, deadline); };
  peers_options.still_up = [this] {
    std::lock_guard<LightLock> lock(op_mutex_);
    return LinksStillUp();
  };
  auto peers = device_path::DirectPeers::Connect(*device, std::move(peers_options), Deadline::AfterMs(config_.timeout_ms));
  if (!peers.ok()) {
    // As a failure of device work: explained (every rank names the rank that failed first) and
    // breaking the communicator, so braidCommGetAsyncError and every later call report it. The
    // call itself returns success, as an enqueue whose work fails later does: nothing was
    // enqueued, so no stream waits for it.
    std::lock_guard<LightLock> lock(op_mutex_);
    if (!broken_.load()) {
      Break(ExplainFailure(peers.status().WithContext("device work"), algorithms::TagSpace::kCollective,
                           next_sequence_, "direct device links"));
    }
    direct_choice_ = DirectChoice::kStaged;
    return static_cast<device_path::DirectCollectives*>(nullptr);
  }
  device_path::DirectCollectives::Options options;
  options.rank = rank_;
  options.size = size_;
  options.timeout_ms = config_.timeout_ms;
  options.fail = [this](const Status& error) {
    if (broken_.load()) return;
    Break(error.WithContext("device work"));
  };
  auto made = device_path::DirectCollectives::Create(*device, std::move(peers).value(), std::move(options));
  if (!made.ok()) {
    Break(made.status());
    return made.status();
  }
  direct_ = std::move(made).value();
  direct_live_.store(direct_.get(), std::memory_order_release);
  direct_choice_ = DirectChoice::kDirect;
  BRAID_LOG(kInfo, rank_) << "device path: allreduce, reduce, allgather, broadcast and reducescatter direct (device "
                          << "memory end to end, " << device_path::DirectCollectives::kSlots << " slots of "
                          << (device_path::DirectCollectives::kSlotBytes >> 20)
                          << " MiB per rank, stream flags); the other device work staged";
  return direct_.get();
}

Status Communicator::LinkDevicePeers(const std::vector<int>& peers) {
  if (device_links_live_.load(std::memory_order_acquire) == nullptr) return Status::Ok();
  std::vector<int> wanted = peers;
  if (wanted.empty()) {
    for (int r = 0; r < size_; ++r) wanted.push_back(r);
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::lock_guard<LightLock> lock(op_mutex_);
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const transport::Transport& cuda_ipc = *device_links_->transports().front();
  const transport::PeerInfo self = PeerInfoOf(rank_, peers_[rank_]);
  const Deadline deadline = OperationDeadline(config_.timeout_ms);
  for (int peer : wanted) {
    if (peer == rank_ || device_connections_[peer] != nullptr) continue;
    if (!cuda_ipc.CanConnect(self, PeerInfoOf(peer, peers_[peer]))) continue;
    auto linked = device_links_->Get(peer, deadline);
    if (!linked.ok()) {
      // As an operation's failure: explained (the root cause published and read, so every rank
      // names the rank that failed first, not the one that closed on it next), then breaking.
      const Status error = ExplainFailure(
          linked.status().WithContext("device work"),
          peers.empty() ? algorithms::TagSpace::kCollective : algorithms::TagSpace::kPointToPoint, next_sequence_,
          "device links");
      Break(error);
      return AsyncError();
    }
    device_connections_[peer] = linked.value();
  }
  return Status::Ok();
}

Status Communicator::LinksStillUp() {
  if (broken_.load()) return AsyncError();
  for (transport::Connection* link : connections_) {
    if (link == nullptr) continue;
    auto probed = link->Probe();
    // A lost peer (kRemoteError) or a closed link (kAborted); anything else (a receive pending,
    // a transport that cannot look ahead) says nothing about the peer.
    if (!probed.ok() && (probed.status().code() == Code::kRemoteError || probed.status().code() == Code::kAborted)) {
      return probed.status();
    }
  }
  return Status::Ok();
}

Status Communicator::MakeDeviceLinksLocked(device::Device* device) {
  if (device_links_ != nullptr || size_ == 1) return Status::Ok();
  const std::string who = "rank " + std::to_string(rank_) + ": device links";
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> names, transport::SelectTransportNames(config_.transports));
  if (std::find(names.begin(), names.end(), "cuda_ipc") == names.end()) return Status::Ok();
  const transport::TransportFactory* factory = nullptr;
  for (const auto& f : transport::TransportFactories()) {
    if (std::string(f.name) == "cuda_ipc") factory = &f;
  }
  if (factory == nullptr || factory->create == nullptr) return Status::Ok();
  transport::TransportContext context;
  context.rank = rank_;
  context.size = size_;
  context.comm_id = comm_id_;
  context.secret = secret_;
  context.config = config_;
  // The process device lives until the process exits (process_device.h): nothing to free.
  context.device = std::shared_ptr<device::Device>(device, [](device::Device*) {});
  auto created = factory->create(context);
  if (!created.ok()) return created.status().WithContext(who + ": creating the cuda_ipc transport");
  if (created.value() == nullptr) return Status::Ok();  // not available here
  // Every rank publishes its address at its first device call; a peer reads it when it first
  // links (waiting for it, within the operation's deadline, if this rank has not got there yet).
  rendezvous::PeerRecord record = peers_[rank_];
  record.addresses = {{"cuda_ipc", created.value()->LocalAddress()}};
  BRAID_RETURN_IF_ERROR(store_->Set("device_links/" + std::to_string(rank_), record.Serialize(),
                                    Deadline::AfterMs(config_.timeout_ms))
                            .WithContext(who + ": publishing the cuda_ipc address"));
  std::vector<std::unique_ptr<transport::Transport>> transports;
  transports.push_back(std::move(created).value());
  // Read when the link is first made, on the progress thread under op_mutex_.
  PeerRecordSource records = [this](int peer, Deadline deadline) -> Result<rendezvous::PeerRecord> {
    const std::string key = "device_links/" + std::to_string(peer);
    for (;;) {
      // In slices: a rank that died before its first device call never publishes, and its
      // peers learn of it through the links that saw it go instead of at the deadline.
      const Deadline slice(std::min(deadline.when(), Deadline::AfterMs(200).when()));
      auto text = store_->Get(key, slice);
      if (text.ok()) return rendezvous::PeerRecord::Parse(text.value());
      if (text.status().code() != Code::kTimeout || deadline.Expired()) {
        return text.status().WithContext("reading rank " + std::to_string(peer) + "'s device links record");
      }
      BRAID_RETURN_IF_ERROR(LinksStillUp().WithContext("waiting for rank " + std::to_string(peer) +
                                                       "'s device links record"));
    }
  };
  device_links_ = std::make_unique<LinkPool>(rank_, peers_, std::move(transports), std::move(records));
  device_links_->AddCommunicator();
  device_connections_.assign(static_cast<size_t>(size_), nullptr);
  device_links_live_.store(device_links_.get(), std::memory_order_release);
  return Status::Ok();
}

Status Communicator::EnqueueCollective(const algorithms::CollectiveArgs& args, void* stream) {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (broken_.load() || finalized_) return broken_.load() ? AsyncError() : WhyUnusable();
  BRAID_ASSIGN_OR_RETURN(device_path::DeviceWorkQueue* queue, DeviceWorkLocked());
  if (device_path::DirectCollectives::Handles(args.kind)) {
    BRAID_ASSIGN_OR_RETURN(device::Device* device, device_path::ProcessDevice());
    BRAID_ASSIGN_OR_RETURN(device_path::DirectCollectives* direct, DirectLocked(device));
    // On the queue's stream: after the staged work enqueued before it, before the staged work after.
    if (direct != nullptr) return direct->Enqueue(args, queue->stream(), stream);
    if (broken_.load()) return Status::Ok();  // the direct links failed: reported as an async error
  }
  return queue->Enqueue(device_path::StageCollective(args, rank_, size_, config_.device_chunk_bytes,
                                                     [this](const algorithms::CollectiveArgs& host) {
                                                       DeviceWorkScope scope(this);
                                                       BRAID_RETURN_IF_ERROR(LinkDevicePeers({}));
                                                       return RunCollective(host);
                                                     }),
                        stream);
}

Status Communicator::JoinDeviceStreams(const std::vector<void*>& streams) {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (broken_.load() || finalized_) return broken_.load() ? AsyncError() : WhyUnusable();
  BRAID_RETURN_IF_ERROR(DeviceWorkLocked().status());
  if (stream_join_ == nullptr) {
    BRAID_ASSIGN_OR_RETURN(device::Device* device, device_path::ProcessDevice());
    stream_join_ = std::make_unique<device_path::StreamJoin>(device);
  }
  return stream_join_->Join(streams);
}

Status Communicator::ReleaseDeviceStreams(const std::vector<void*>& streams) {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (stream_join_ == nullptr) return Status::Internal("ReleaseDeviceStreams before JoinDeviceStreams");
  return stream_join_->Release(streams);
}

Status Communicator::EnqueuePointToPoint(const std::vector<PeerTransfer>& transfers, void* stream) {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (broken_.load() || finalized_) return broken_.load() ? AsyncError() : WhyUnusable();
  BRAID_ASSIGN_OR_RETURN(device_path::DeviceWorkQueue* queue, DeviceWorkLocked());
  std::vector<device_path::Transfer> staged;
  for (const PeerTransfer& t : transfers) staged.push_back({t.is_send, t.peer, t.sendbuf, t.recvbuf, t.bytes});
  return queue->Enqueue(device_path::StageTransfers(staged, config_.device_chunk_bytes,
                                                    [this](const std::vector<device_path::Transfer>& host) {
                                                      DeviceWorkScope scope(this);
                                                      std::vector<int> peers;
                                                      for (const auto& t : host) peers.push_back(t.peer);
                                                      BRAID_RETURN_IF_ERROR(LinkDevicePeers(peers));
                                                      std::vector<PeerTransfer> batch;
                                                      for (const auto& t : host) {
                                                        batch.push_back({t.is_send, t.peer, t.sendbuf, t.recvbuf, t.bytes});
                                                      }
                                                      return RunPointToPoint(batch);
                                                    }),
                        stream);
}

}  // namespace braid
