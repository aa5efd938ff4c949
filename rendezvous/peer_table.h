// The peer table: how the ranks of a communicator learn about each other through the store
// without every rank reading every other rank's record.
//
// Why not every record to every rank: at n ranks that is n^2 records through the store's one
// thread (1024 ranks: a million records, ~150 MB of replies), while a rank links only the peers
// its algorithms use (its two ring neighbours at init, others on first use). So each rank
// publishes its full record (PeerRecord: identity and addresses) under peer/<rank>, learns every
// rank's identity (host, boot id, network namespace, CPUs, the names of the transports it offers:
// what the topology and the cost model need) from one table, and reads a peer's addresses only
// when it first links to that peer (FetchPeer). Ranks of one host share an identity, so the table
// costs a few bytes per rank.
//
// Keys, under the communicator's store view: "nranks" (the agreed size), "claim/<rank>",
// "peer/<rank>" (full records), "peers_joined" (counter), "peer_table".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "rendezvous/peer_exchange.h"
#include "rendezvous/store.h"

namespace braid::rendezvous {

// `record` as the peer table carries it: every field, the addresses' transport names, no address.
PeerRecord IdentityOf(const PeerRecord& record);

// Every rank's identity, held as the distinct identities and one index per rank. Why not a
// vector of n records: ranks of a host share an identity, and every rank decodes the table, so
// at 1024 ranks n copies (~0.2 ms per rank, allocations mostly) were the larger part of a rank's
// bootstrap CPU, and n records ~300 KB of its memory. Immutable once decoded; any thread.
class PeerTable {
 public:
  // `records` (one per rank) as a table: equal records share one entry. For holders of full
  // records (tests, tools) that hand them to what takes a table.
  static PeerTable FromRecords(const std::vector<PeerRecord>& records);
  // The table of `ranks` (ranks of this one, each in [0, size())), in that order: a subgroup's.
  PeerTable Subset(const std::vector<int>& ranks) const;

  int size() const { return static_cast<int>(index_.size()); }
  const PeerRecord& operator[](int rank) const { return identities_[index_[rank]]; }
  // How many distinct identities (hosts, in practice) the table holds, each, and which one a
  // rank has: what lets a holder work per host instead of per rank.
  int distinct() const { return static_cast<int>(identities_.size()); }
  const PeerRecord& identity(int i) const { return identities_[i]; }
  int identity_of(int rank) const { return static_cast<int>(index_[rank]); }
  // One record per rank (tests compare it with what was published). Holders keep the table:
  // n records cost a communicator of 1024 ranks ~300 KB and most of its bootstrap CPU.
  std::vector<PeerRecord> Expand() const;

 private:
  friend Result<PeerTable> DecodePeerTable(const std::string& text, int size);
  std::vector<PeerRecord> identities_;
  std::vector<uint32_t> index_;
};

// The table's wire form: each distinct identity once, then one identity index per rank. Decode
// refuses anything malformed or of another size (kRemoteError naming what), since the text comes
// from the store.
std::string EncodePeerTable(const std::vector<PeerRecord>& identities);
Result<PeerTable> DecodePeerTable(const std::string& text, int size);

// Checks that every rank agrees on `size` and that no two callers claim the same `rank`,
// publishes `self` under peer/<rank>, and waits (until `deadline`) for all ranks; returns the peer
// table: every rank's IdentityOf(record), indexed by rank (addresses named, not filled in).
// Returning is the communicator's barrier: the table exists only once every rank has published.
// The rank whose arrival completes the count builds it (one read of all records, all present by
// then); every other rank parks one Get on it, so the store answers O(n) requests and never
// parks a request on n keys. On timeout the error lists, by number, the ranks that never arrived.
Result<PeerTable> ExchangePeerTable(Store& store, int rank, int size,
                                                  const PeerRecord& self, Deadline deadline);

// rendezvous::BusiestHost over the table, one pass per distinct identity.
HostLoad BusiestHost(const PeerTable& table);

// `peer`'s full record (addresses included) as it published it. Present once ExchangePeerTable
// has returned on any rank, so it never waits for the peer.
Result<PeerRecord> FetchPeer(Store& store, int peer, Deadline deadline);

}  // namespace braid::rendezvous
