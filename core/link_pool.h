// LinkPool: one rank's transports and the links they made, owned jointly by a communicator and
// the children split from it with splitShare (NCCL's ncclConfig_t::splitShare).
//
// Why share: every communicator normally owns its transports (a listening socket and a thread per
// transport) and its links (a socket or a shared-memory segment per peer used). A job that splits
// many subgroups multiplies those. A child made with splitShare instead reaches its peers through
// the parent's links, so it adds no listener, no thread and no link for a pair its parent already
// linked.
//
// The price, as in NCCL: a link is one FIFO stream, so the communicators of a pool take turns —
// while several share it, each operation holds the pool's lane from start to end — and every
// rank must issue the
// operations of communicators that share a pool in the same order (otherwise they wait on each
// other until the timeout, which then names the ranks). A failure that breaks one of them aborts
// the pool's transports, so the others fail at their next operation.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "rendezvous/peer_exchange.h"
#include "rendezvous/peer_table.h"
#include "rendezvous/store.h"
#include "transport/connection.h"
#include "transport/transport.h"

namespace braid {

// What a transport needs to know about a rank's record to decide whether it can reach it.
transport::PeerInfo PeerInfoOf(int rank, const rendezvous::PeerRecord& record);

// Where a peer's full record (its addresses) comes from when it is first linked.
using PeerRecordSource =
    std::function<Result<rendezvous::PeerRecord>(int peer, Deadline deadline)>;
// The records a communicator's ranks published in `store` (rendezvous::FetchPeer).
PeerRecordSource RecordsInStore(std::shared_ptr<rendezvous::Store> store);

class LinkPool {
 public:
  // `rank` is this process's rank among `peers` (the communicator that created the transports).
  // `peers` is the peer table (identities; their addresses need not be filled in), and a peer's
  // addresses come from `records` when it is first linked, so a rank reads the records of the
  // peers its algorithms use, not all n (rendezvous/peer_table.h). Null `records`: `peers` hold
  // the full records.
  LinkPool(int rank, rendezvous::PeerTable peers,
           std::vector<std::unique_ptr<transport::Transport>> transports,
           PeerRecordSource records = nullptr);
  // As above, from one full record per rank (tests).
  LinkPool(int rank, const std::vector<rendezvous::PeerRecord>& peers,
           std::vector<std::unique_ptr<transport::Transport>> transports,
           PeerRecordSource records = nullptr)
      : LinkPool(rank, rendezvous::PeerTable::FromRecords(peers), std::move(transports),
                 std::move(records)) {}
  // Closes every link (pending requests fail), then the transports.
  ~LinkPool();
  LinkPool(const LinkPool&) = delete;
  LinkPool& operator=(const LinkPool&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  // Every rank's identity (host, boot id, network namespace, CPUs, transport names); addresses
  // only where the pool has no record source.
  const rendezvous::PeerTable& peers() const { return peers_; }
  const std::vector<std::unique_ptr<transport::Transport>>& transports() const { return transports_; }

  // Held for the whole of each operation of each communicator on this pool while more than one
  // communicator uses it (Shared()): links are FIFO streams, so only one operation's messages may
  // be on them at a time.
  std::mutex& lane() { return lane_; }
  // Communicators using this pool register for their lifetime. Why: a pool with one communicator
  // (every pool, unless split with splitShare) needs no lane, that communicator's op_mutex_
  // already orders its operations, and the lane's lock and unlock were two of the few locked
  // instructions of a small collective (an 8-byte allreduce without both mutexes: 0.24 -> 0.22
  // us). Safe because the count only goes from 1 to 2 when Split makes a sharing child, which it
  // does holding the splitting communicator's op_mutex_ (no operation of the pool's only user is
  // in flight then), and every operation reads the count after taking its op_mutex_.
  void AddCommunicator() { communicators_.fetch_add(1, std::memory_order_acq_rel); }
  void RemoveCommunicator() { communicators_.fetch_sub(1, std::memory_order_acq_rel); }
  bool Shared() const { return communicators_.load(std::memory_order_acquire) > 1; }

  // The link to `peer` (a rank of the pool), made on first use with the first transport in
  // priority order that can reach it (both ranks of the pair call it). A transport whose Connect
  // finds the peer unreachable (kRemoteError) hands over to the next one that can connect the
  // pair, with an INFO line; the last such error is returned when none is left. Caller holds
  // lane() while the pool is Shared(); otherwise its one communicator's op_mutex_ orders the
  // calls.
  Result<transport::Connection*> Get(int peer, Deadline deadline);
  // As Get, but never waits for the peer: the existing link; else one this rank makes alone
  // (it dials, the peer's listener answers; up to `deadline`); else one the peer has already
  // dialed (claimed now), over the first transport that can link the pair or, where the peer
  // found that one out of its reach and moved on as Get does, over a later one; else nullptr
  // (the peer has not dialed yet: ask again later). Same locking as Get.
  Result<transport::Connection*> GetIfReady(int peer, Deadline deadline);
  // Links made so far. Caller holds lane().
  size_t LinkCount() const { return links_.size(); }

  // Fails every pending request of every link with `reason` and refuses new ones; any thread.
  void Abort(const Status& reason);

 private:
  // Records `link` to `peer`, made over `over` at `address`, as the pool's link to `peer` (INFO
  // line; the fault tests' decorator). Same locking as Get.
  transport::Connection* Adopt(int peer, const transport::Transport& over,
                               const std::string& address,
                               std::unique_ptr<transport::Connection> link);
  // `peer`'s full record, from records_ on the first call. Same locking as Get.
  Result<const rendezvous::PeerRecord*> AddressesOf(int peer, Deadline deadline);

  const int rank_;
  const rendezvous::PeerTable peers_;
  const PeerRecordSource records_;
  // The full records read so far, by rank; guarded by lane_.
  std::map<int, rendezvous::PeerRecord> fetched_;
  // Fixed after construction, so Abort() may walk it from any thread.
  const std::vector<std::unique_ptr<transport::Transport>> transports_;
  std::mutex lane_;
  std::atomic<int> communicators_{0};
  std::map<int, std::unique_ptr<transport::Connection>> links_;  // guarded by lane_
  // links_ by peer rank (null: not linked yet), so the lookup every message step makes is an
  // index instead of a tree search; guarded by lane_.
  std::vector<transport::Connection*> by_peer_;
};

}  // namespace braid
