#include "rendezvous/peer_exchange.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string_view>

namespace braid::rendezvous {
namespace {

std::string PeerKey(int rank) { return "peer/" + std::to_string(rank); }

std::string ListRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    if (i == 32) return out + "... (" + std::to_string(ranks.size()) + " in all)";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

std::string PeerRecord::Serialize() const {
  std::string out = "host=" + host + "\nboot_id=" + boot_id + "\nnet_ns=" + net_ns +
                    "\ncpus=" + std::to_string(cpus) + "\n";
  for (const auto& [name, address] : addresses) out += "addr." + name + "=" + address + "\n";
  return out;
}

// Scans the lines in place rather than through a stream: every rank parses each distinct host's
// record of the peer table (rendezvous/peer_table.h), and a 1024-rank table through
// std::istringstream took ~0.6 ms per rank, most of a rank's share of the bootstrap.
Result<PeerRecord> PeerRecord::Parse(const std::string& text) {
  PeerRecord record;
  const std::string_view all(text);
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\n', start);
    if (end == std::string_view::npos) end = all.size();
    const std::string_view line = all.substr(start, end - start);
    start = end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::RemoteError("malformed peer record line '" + std::string(line) + "'");
    }
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "host") {
      record.host = value;
    } else if (key == "boot_id") {
      record.boot_id = value;
    } else if (key == "net_ns") {
      record.net_ns = value;
    } else if (key == "cpus") {
      const std::string digits(value);
      char* stop = nullptr;
      const long cpus = std::strtol(digits.c_str(), &stop, 10);
      if (stop == digits.c_str() || *stop != '\0' || cpus < 0 || cpus > 1 << 20) {
        return Status::RemoteError("malformed peer record line '" + std::string(line) + "'");
      }
      record.cpus = static_cast<int>(cpus);
    } else if (key.substr(0, 5) == "addr.") {
      record.addresses.emplace_back(key.substr(5), value);
    }
  }
  return record;
}

const std::string* PeerRecord::AddressOf(const std::string& transport) const {
  for (const auto& [name, address] : addresses) {
    if (name == transport) return &address;
  }
  return nullptr;
}

HostLoad BusiestHost(const std::vector<PeerRecord>& peers) {
  std::map<std::string, std::pair<int, int>> per_host;  // host + boot id -> (ranks, cpus)
  for (const PeerRecord& record : peers) {
    auto& [ranks, cpus] = per_host[record.host + "/" + record.boot_id];
    ++ranks;
    cpus = std::max(cpus, std::max(record.cpus, 1));
  }
  HostLoad load;
  for (const auto& [host, counts] : per_host) {
    load.oversubscribed |= counts.first > counts.second;
    load.ranks_per_cpu =
        std::max(load.ranks_per_cpu, static_cast<double>(counts.first) / counts.second);
  }
  return load;
}

std::string HostKey(const PeerRecord& record) {
  return record.host + "/" + record.boot_id + "/" + record.net_ns;
}

PeerRecord LocalPeerRecord() {
  PeerRecord record;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  record.host = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, record.boot_id);
  char ns[64] = {0};
  const ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  if (n > 0) record.net_ns.assign(ns, static_cast<size_t>(n));
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  record.cpus = cpus > 0 ? static_cast<int>(cpus) : 0;
  return record;
}

Result<std::vector<PeerRecord>> ExchangePeers(Store& store, int rank, int size,
                                              const PeerRecord& self, Deadline deadline) {
  const std::string who = "rank " + std::to_string(rank);
  std::string agreed;
  BRAID_ASSIGN_OR_RETURN(agreed, store.CompareSet("nranks", "", std::to_string(size), deadline));
  if (agreed != std::to_string(size)) {
    return Status::InvalidUsage(who + " was given nranks=" + std::to_string(size) +
                                " but another rank of this communicator registered nranks=" +
                                agreed);
  }
  int64_t claims = 0;
  BRAID_ASSIGN_OR_RETURN(claims, store.Add("claim/" + std::to_string(rank), 1, deadline));
  if (claims > 1) {
    return Status::InvalidUsage(who + " is claimed by more than one caller: two processes (or "
                                      "threads) were given the same rank");
  }
  BRAID_RETURN_IF_ERROR(store.Set(PeerKey(rank), self.Serialize(), deadline));

  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(PeerKey(r));
  Status waited = store.Wait(keys, deadline);
  if (waited.code() == Code::kTimeout) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      Result<bool> present = store.Check({PeerKey(r)}, Deadline::AfterMs(5000));
      if (present.ok() && !present.value()) missing.push_back(r);
    }
    return Status::Timeout(who + ": timed out waiting for " + std::to_string(missing.size()) +
                           " of " + std::to_string(size) +
                           " ranks to join the communicator; missing ranks: " +
                           ListRanks(missing));
  }
  BRAID_RETURN_IF_ERROR(waited);
  std::vector<std::string> values;
  BRAID_ASSIGN_OR_RETURN(values, store.MultiGet(keys, deadline));
  std::vector<PeerRecord> peers;
  for (int r = 0; r < size; ++r) {
    PeerRecord record;
    BRAID_ASSIGN_OR_RETURN(record, PeerRecord::Parse(values[r]));
    peers.push_back(std::move(record));
  }
  return peers;
}

}  // namespace braid::rendezvous
