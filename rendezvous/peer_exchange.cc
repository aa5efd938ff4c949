#include "rendezvous/peer_exchange.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string_view>

namespace braid::rendezvous {

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

}  // namespace braid::rendezvous
