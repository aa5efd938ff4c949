#include "core/link_pool.h"

#include <string>

#include "core/base/logging.h"
#include "rendezvous/peer_table.h"
#include "transport/fault_injection.h"

namespace braid {
transport::PeerInfo PeerInfoOf(int rank, const rendezvous::PeerRecord& record) {
  transport::PeerInfo info;
  info.rank = rank;
  info.host = record.host;
  info.boot_id = record.boot_id;
  info.net_ns = record.net_ns;
  return info;
}

PeerRecordSource RecordsInStore(std::shared_ptr<rendezvous::Store> store) {
  return [store = std::move(store)](int peer, Deadline deadline) {
    return rendezvous::FetchPeer(*store, peer, deadline);
  };
}

LinkPool::LinkPool(int rank, rendezvous::PeerTable peers,
                   std::vector<std::unique_ptr<transport::Transport>> transports,
                   PeerRecordSource records)
    : rank_(rank),
      peers_(std::move(peers)),
      records_(std::move(records)),
      transports_(std::move(transports)),
      by_peer_(static_cast<size_t>(peers_.size()), nullptr) {}

LinkPool::~LinkPool() {
  std::lock_guard<std::mutex> lock(lane_);
  for (auto& [peer, link] : links_) {
    link->Close(Status::Aborted("rank " + std::to_string(rank_) + ": communicator destroyed"));
  }
  links_.clear();
  by_peer_.assign(by_peer_.size(), nullptr);
}

Result<const rendezvous::PeerRecord*> LinkPool::AddressesOf(int peer, Deadline deadline) {
  if (!records_) return &peers_[peer];
  auto known = fetched_.find(peer);
  if (known != fetched_.end()) return &known->second;
  Result<rendezvous::PeerRecord> record = records_(peer, deadline);
  if (!record.ok()) return record.status().WithContext("rank " + std::to_string(rank_));
  return &fetched_.emplace(peer, std::move(record).value()).first->second;
}

Result<transport::Connection*> LinkPool::Get(int peer, Deadline deadline) {
  if (by_peer_[peer] != nullptr) return by_peer_[peer];
  const rendezvous::PeerRecord* record = nullptr;
  BRAID_ASSIGN_OR_RETURN(record, AddressesOf(peer, deadline));
  const transport::PeerInfo self_info = PeerInfoOf(rank_, peers_[rank_]);
  const transport::PeerInfo peer_info = PeerInfoOf(peer, peers_[peer]);
  // Why go on after a failure: a transport that says it can connect may still find the peer out
  // of its reach (shared memory between namespaces it could not tell apart), and that is no
  // reason to fail the job while a later transport reaches the peer. Only kRemoteError (nobody
  // answers at the peer's address) moves on: both ranks of the pair see that alike, so both move
  // to the same next transport; a timeout, an abort or bad input ends the attempt.
  Status unreachable;
  const char* unreachable_over = nullptr;
  for (const auto& t : transports_) {
    const std::string* address = record->AddressOf(t->name());
    if (address == nullptr || !t->CanConnect(self_info, peer_info)) continue;
    if (unreachable_over != nullptr) {
      BRAID_LOG(kInfo, rank_) << "no " << unreachable_over << " link to rank " << peer << " ("
                              << unreachable.message() << "); trying " << t->name();
    }
    auto connection = t->Connect(peer, *address, deadline);
    if (!connection.ok()) {
      Status failed = connection.status().WithContext("rank " + std::to_string(rank_) +
                                                      ": connecting to rank " +
                                                      std::to_string(peer) + " over " + t->name());
      if (failed.code() != Code::kRemoteError) return failed;
      unreachable = std::move(failed);
      unreachable_over = t->name();
      continue;
    }
    return Adopt(peer, *t, *address, std::move(connection).value());
  }
  if (unreachable_over != nullptr) return unreachable;
  return Status::InvalidUsage("rank " + std::to_string(rank_) + ": no enabled transport can reach rank " +
                              std::to_string(peer) + " (host " + peers_[peer].host +
                              "); check BRAID_TRANSPORTS");
}

transport::Connection* LinkPool::Adopt(int peer, const transport::Transport& over,
                                       const std::string& address,
                                       std::unique_ptr<transport::Connection> link) {
  BRAID_LOG(kInfo, rank_) << "connected to rank " << peer << " over " << over.name() << " ("
                          << address << ")";
  if (auto decorate = transport::CurrentConnectionDecorator()) {
    link = decorate(rank_, peer, std::move(link));  // fault tests only
  }
  transport::Connection* raw = link.get();
  links_[peer] = std::move(link);
  by_peer_[peer] = raw;
  return raw;
}

Result<transport::Connection*> LinkPool::GetIfReady(int peer, Deadline deadline) {
  if (by_peer_[peer] != nullptr) return by_peer_[peer];
  // The record is read with the caller's deadline; the claims below use an expired one.
  const rendezvous::PeerRecord* record = nullptr;
  BRAID_ASSIGN_OR_RETURN(record, AddressesOf(peer, deadline));
  const transport::PeerInfo self_info = PeerInfoOf(rank_, peers_[rank_]);
  const transport::PeerInfo peer_info = PeerInfoOf(peer, peers_[peer]);
  // Why look past the first transport: the peer dials as Get does, so where the first transport
  // that can link the pair proved out of its reach (kRemoteError) it dialed the next one, and its
  // link waits there; claiming only on the first would never find it, and a receive from any
  // rank would wait for that peer until its deadline. Each claim with an expired deadline takes
  // a link the peer made or leaves nothing behind, so asking every transport in order is safe.
  const char* passed_over = nullptr;  // the first transport that had no link from the peer
  for (const auto& t : transports_) {
    const std::string* address = record->AddressOf(t->name());
    if (address == nullptr || !t->CanConnect(self_info, peer_info)) continue;
    if (!t->AwaitsDial(rank_, peer)) {
      // This rank dials: Get makes the link, falling back as the peer does. Past a transport
      // where this rank waits, though, the peer may still be dialing that one: it is not known
      // yet whether this one is needed, so nothing is dialed.
      if (passed_over == nullptr) return Get(peer, deadline);
      return static_cast<transport::Connection*>(nullptr);
    }
    auto claimed = t->Connect(peer, *address, Deadline(Deadline::Clock::now()));
    if (claimed.ok()) {
      if (passed_over != nullptr) {
        BRAID_LOG(kInfo, rank_) << "no " << passed_over << " link from rank " << peer
                                << " (out of its reach); it linked over " << t->name();
      }
      return Adopt(peer, *t, *address, std::move(claimed).value());
    }
    if (claimed.status().code() != Code::kTimeout) {
      return claimed.status().WithContext("rank " + std::to_string(rank_) +
                                          ": connecting to rank " + std::to_string(peer) +
                                          " over " + t->name());
    }
    if (passed_over == nullptr) passed_over = t->name();
  }
  if (passed_over != nullptr) return static_cast<transport::Connection*>(nullptr);
  return Get(peer, deadline);  // no transport can link the pair: Get says so
}

void LinkPool::Abort(const Status& reason) {
  for (const auto& t : transports_) t->Abort(reason);
}

}  // namespace braid
