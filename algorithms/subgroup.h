// Subgroup: a CollectiveContext over some of a communicator's ranks, so that a two-level
// algorithm can run the flat ones inside a host or across hosts.
//
// Why not a sub-communicator (Communicator::Split): a split makes new links, a new store prefix
// and a new sequence space, once per communicator; a two-level collective needs the groups of
// every call at no cost, over the links the communicator already has. A Subgroup is a view: its
// rank j is the communicator's rank members[j], its connection to j is the communicator's
// connection to members[j], made on first use as usual. Errors name the communicator's ranks
// (CollectiveContext::ranks).
//
// Tags. A subgroup's context keeps the collective's sequence, so every message of a two-level
// collective carries the collective's tag space and number, and each phase numbers its messages
// from 0 on each of its links. Two phases that share a link (a host's reduce-scatter and its
// all-gather) therefore reuse message numbers; that is safe because a phase's receives complete
// before the next phase posts any on that link (Primitives::Finish), and a connection delivers in
// order, so the later phase's messages queue behind the earlier one's and are matched after them.
//
// Scratch. Memory a two-level algorithm keeps between phases (`reserve_bytes`, Own()) sits at the
// front of the communicator's scratch, and the subgroup hands the phases what lies behind it.
// The communicator's scratch is one growable buffer, so the constructor grows it at once to hold
// the reserve plus what a ring-family phase asks for (Primitives' slots): a phase's own request
// then never moves the buffer while the reserve is in use. Phases must be ring-family algorithms
// (written in Primitives), whose scratch that bound covers.
//
// Thread safety: one Subgroup belongs to one collective on one thread; it refers to the parent
// context, which must outlive it, and cannot be copied or moved (its context refers to it).
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/collective_context.h"
#include "algorithms/host_topology.h"
#include "core/base/status.h"
#include "transport/connection.h"

namespace braid::algorithms {

class Subgroup {
 public:
  // `members`: the communicator's ranks of this group, in the group's rank order, which must hold
  // parent.rank (every member builds the same list). `reserve_bytes`: scratch kept for the
  // caller (Own()).
  Subgroup(const CollectiveContext& parent, std::vector<int> members, size_t reserve_bytes = 0);
  Subgroup(const Subgroup&) = delete;
  Subgroup& operator=(const Subgroup&) = delete;

  const CollectiveContext& context() const { return ctx_; }
  int rank() const { return ctx_.rank; }
  int size() const { return ctx_.size; }
  // The reserved scratch (reserve_bytes), the same memory for every subgroup of one collective
  // made with the same reserve.
  void* Own() const { return parent_.scratch(reserve_); }

 private:
  struct Connect {
    const Subgroup* group;
    Result<transport::Connection*> operator()(int peer) const {
      return group->parent_.connection(group->members_[peer]);
    }
  };
  struct Scratch {
    const Subgroup* group;
    void* operator()(size_t bytes) const {
      return static_cast<char*>(group->parent_.scratch(group->reserve_ + bytes)) + group->reserve_;
    }
  };

  const CollectiveContext& parent_;
  const std::vector<int> members_;
  std::vector<int> ranks_;  // the communicator's rank of each member (for messages)
  const size_t reserve_;
  Connect connect_{this};
  Scratch scratch_{this};
  CollectiveContext ctx_;
};

// The scratch a ring-family phase in a Subgroup may ask for (Primitives' slots): a reserve this
// large keeps two subgroups' phases apart when they run at once on two threads.
size_t SubgroupPhaseScratch(const CollectiveContext& ctx);

// The groups a two-level algorithm runs its phases in, from the communicator's topology.
// Host `host`'s ranks, in rank order (the group inside a host).
inline const std::vector<int>& HostGroup(const HostTopology& topology, int host) {
  return topology.ranks_on(host);
}
// The ranks whose place on their host is `local_rank`, one per host in host order (a group
// across hosts); a host with fewer ranks has none in it.
std::vector<int> SamePlaceGroup(const HostTopology& topology, int local_rank);
// One rank per host, in host order: `root` on its own host, the lowest rank on every other (the
// group a rooted two-level collective crosses the hosts in).
std::vector<int> LeaderGroup(const HostTopology& topology, int root);

}  // namespace braid::algorithms
