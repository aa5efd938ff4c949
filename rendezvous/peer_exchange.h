// What each rank publishes about itself at rendezvous (PeerRecord: who it is, how to reach it),
// and what the job's records say about its hosts. rendezvous/peer_table.h exchanges them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace braid::rendezvous {

struct PeerRecord {
  std::string host;
  std::string boot_id;
  // The publisher's network namespace ("net:[4026531840]", the link /proc/self/ns/net points
  // to; "" when it cannot be read). Why: ranks in containers or namespaces of one kernel share
  // the host name and boot id, but not abstract Unix sockets or loopback, so they are different
  // hosts to every transport.
  std::string net_ns;
  // Online CPUs of the publisher's machine (0 = unknown): with the peer table, every rank can tell
  // alike whether some host runs more ranks than it has CPUs (the cost model depends on it).
  int cpus = 0;
  // (transport name, address) in the publisher's transport order.
  std::vector<std::pair<std::string, std::string>> addresses;

  // Lines of "key=value"; values never hold newlines.
  std::string Serialize() const;
  static Result<PeerRecord> Parse(const std::string& text);
  // nullptr if the peer did not publish an address for `transport`.
  const std::string* AddressOf(const std::string& transport) const;
};

// This machine's host name, boot id (/proc/sys/kernel/random/boot_id), network namespace and
// online CPUs.
PeerRecord LocalPeerRecord();

// Who shares a host with whom: ranks whose records give the same key run on one host in the
// transports' sense (one kernel, one network namespace), so shared memory can link them.
std::string HostKey(const PeerRecord& record);

// How crowded the job's busiest host is, from the peer table (so every rank computes the same):
// whether some machine (host name and boot id) runs more ranks than it has CPUs, and the largest
// ranks-per-CPU ratio over the machines (1 when every rank can have a core). An unknown CPU count
// counts as one CPU. Network namespaces are not told apart here: namespaces of one kernel share
// its CPUs.
struct HostLoad {
  bool oversubscribed = false;
  double ranks_per_cpu = 1.0;
};
HostLoad BusiestHost(const std::vector<PeerRecord>& peers);

}  // namespace braid::rendezvous
