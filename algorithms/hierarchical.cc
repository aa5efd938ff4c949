#include "algorithms/hierarchical.h"

namespace braid::algorithms {

bool SpansTwoLevels(const CollectiveContext& ctx, bool needs_uniform) {
  const HostTopology* topology = ctx.topology;
  if (topology == nullptr || topology->ranks() != ctx.size) return false;
  if (topology->hosts() <= 1 || topology->max_ranks_per_host() <= 1) return false;
  return !needs_uniform || topology->uniform();
}

LinkModel IntraHostModel(const LinkModel& link) {
  LinkModel inside = link;
  if (link.intra_host_latency_us > 0) inside.latency_us = link.intra_host_latency_us;
  if (link.intra_host_bandwidth_gbps > 0) inside.bandwidth_gbps = link.intra_host_bandwidth_gbps;
  if (link.intra_host_fan_out_us > 0) inside.fan_out_us = link.intra_host_fan_out_us;
  inside.reduces_on_receive = link.intra_host_reduces_on_receive;
  inside.hosts = 1;
  inside.ranks_per_host = 0;
  return inside;
}

}  // namespace braid::algorithms
