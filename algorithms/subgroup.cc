#include "algorithms/subgroup.h"

#include <algorithm>
#include <utility>

#include "algorithms/primitives.h"

namespace braid::algorithms {

Subgroup::Subgroup(const CollectiveContext& parent, std::vector<int> members, size_t reserve_bytes)
    : parent_(parent), members_(std::move(members)), reserve_(reserve_bytes) {
  ranks_.reserve(members_.size());
  for (int member : members_) ranks_.push_back(CommunicatorRank(parent, member));
  ctx_.rank = static_cast<int>(std::find(members_.begin(), members_.end(), parent.rank) -
                               members_.begin());
  ctx_.size = static_cast<int>(members_.size());
  ctx_.sequence = parent.sequence;
  ctx_.chunk_bytes = parent.chunk_bytes;
  ctx_.deadline = parent.deadline;
  ctx_.connection.connect = connect_;
  ctx_.scratch = scratch_;
  ctx_.ranks = ranks_.data();
  // Room for the reserve and a ring-family phase's slots (chunk_elems elements each, at least one
  // element of the widest type), so no phase's request moves the reserve (see the header).
  parent_.scratch(reserve_ + SubgroupPhaseScratch(parent));
}

size_t SubgroupPhaseScratch(const CollectiveContext& ctx) {
  return Primitives::kSlots * (ctx.chunk_bytes + 16);
}

std::vector<int> SamePlaceGroup(const HostTopology& topology, int local_rank) {
  std::vector<int> group;
  for (int host = 0; host < topology.hosts(); ++host) {
    const std::vector<int>& ranks = topology.ranks_on(host);
    if (local_rank < static_cast<int>(ranks.size())) group.push_back(ranks[local_rank]);
  }
  return group;
}

std::vector<int> LeaderGroup(const HostTopology& topology, int root) {
  std::vector<int> group;
  const int root_host = topology.host_of(root);
  for (int host = 0; host < topology.hosts(); ++host) {
    group.push_back(host == root_host ? root : topology.ranks_on(host).front());
  }
  return group;
}

}  // namespace braid::algorithms
