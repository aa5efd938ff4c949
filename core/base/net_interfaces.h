// Network interfaces: which local IP address a rank publishes for its TCP listeners.
//
// Why a policy and not "the hostname's address": hosts in clusters carry docker bridges, veth
// pairs, libvirt bridges and loopback, and a rank that publishes one of those is unreachable
// from other hosts. Like NCCL, braid prefers real interfaces, lets BRAID_SOCKET_IFNAME pick
// (NCCL_SOCKET_IFNAME's syntax), and falls back to loopback only when nothing else exists.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace braid {

struct Interface {
  std::string name;     // "eth0"
  int family = 0;       // AF_INET or AF_INET6
  std::string address;  // "192.0.2.2", "fd00::2"; IPv6 link-local carries "%<ifname>"
  bool loopback = false;
  bool up = false;
  bool link_local = false;  // IPv6 fe80::/10
};

// The addresses of this host's interfaces, in getifaddrs order (IPv4 and IPv6 only).
Result<std::vector<Interface>> ListInterfaces();

// NCCL_SOCKET_IFNAME syntax: a comma-separated list of name prefixes ("eth,ib"); a leading '^'
// turns it into a list to exclude; a leading '=' makes the names exact rather than prefixes
// ("=eth0"); "^=" excludes exact names. An empty spec matches every interface. Blanks around
// list items are ignored.
bool MatchesIfnameSpec(const std::string& spec, const std::string& ifname);

// Picks the address to publish among `interfaces`; ChooseAddress below calls it with
// ListInterfaces() (separate so tests can feed made-up hosts).
//   family: "" (either; IPv4 preferred), "AF_INET" or "AF_INET6".
//   Interfaces that are down and IPv6 link-local addresses are never chosen.
//   Without a spec: real interfaces first, then virtual ones (docker*, veth*, virbr*), then
//   loopback. With a spec: only matching interfaces, real before virtual before loopback; if
//   none matches, InvalidArgument naming the spec and listing the interfaces seen.
Result<std::string> ChooseAddressFrom(const std::vector<Interface>& interfaces,
                                      const std::string& ifname_spec, const std::string& family);
Result<std::string> ChooseAddress(const std::string& ifname_spec, const std::string& family);

}  // namespace braid
