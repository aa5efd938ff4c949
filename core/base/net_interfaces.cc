#include "core/base/net_interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace braid {
namespace {

std::string Trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = Trim(text.substr(start, comma - start));
    if (!item.empty()) items.push_back(item);
    start = comma + 1;
  }
  return items;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// NCCL's order of preference when nothing is specified: real interfaces, then virtual bridges
// (a container's only way out may be its docker interface), then loopback.
enum Tier { kReal = 0, kVirtual = 1, kLoopback = 2 };

Tier TierOf(const Interface& itf) {
  if (itf.loopback || itf.name == "lo") return kLoopback;
  for (const char* prefix : {"docker", "veth", "virbr"}) {
    if (StartsWith(itf.name, prefix)) return kVirtual;
  }
  return kReal;
}

std::string Describe(const std::vector<Interface>& interfaces) {
  if (interfaces.empty()) return "none";
  std::string text;
  for (const Interface& itf : interfaces) {
    if (!text.empty()) text += ", ";
    text += itf.name + " " + itf.address;
    if (!itf.up) text += " (down)";
    if (itf.link_local) text += " (link-local)";
  }
  return text;
}

}  // namespace

Result<std::vector<Interface>> ListInterfaces() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return Status::SystemError(std::string("getifaddrs failed: ") + std::strerror(errno));
  }
  std::vector<Interface> interfaces;
  for (struct ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_name == nullptr) continue;
    int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    Interface itf;
    itf.name = entry->ifa_name;
    itf.family = family;
    itf.loopback = (entry->ifa_flags & IFF_LOOPBACK) != 0;
    itf.up = (entry->ifa_flags & IFF_UP) != 0;
    char text[INET6_ADDRSTRLEN] = {0};
    if (family == AF_INET) {
      const auto* sin = reinterpret_cast<const struct sockaddr_in*>(entry->ifa_addr);
      inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
      itf.address = text;
    } else {
      const auto* sin6 = reinterpret_cast<const struct sockaddr_in6*>(entry->ifa_addr);
      inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
      itf.address = text;
      itf.link_local = IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr);
      // A link-local address means nothing without its scope; carry it so the text is usable.
      if (itf.link_local) itf.address += "%" + itf.name;
    }
    interfaces.push_back(std::move(itf));
  }
  freeifaddrs(list);
  return interfaces;
}

bool MatchesIfnameSpec(const std::string& spec, const std::string& ifname) {
  std::string rest = Trim(spec);
  bool exclude = false;
  bool exact = false;
  if (!rest.empty() && rest[0] == '^') {
    exclude = true;
    rest = rest.substr(1);
  }
  if (!rest.empty() && rest[0] == '=') {
    exact = true;
    rest = rest.substr(1);
  }
  std::vector<std::string> names = SplitList(rest);
  if (names.empty()) return true;  // "" or "^": no restriction
  bool listed = std::any_of(names.begin(), names.end(), [&](const std::string& name) {
    return exact ? ifname == name : StartsWith(ifname, name);
  });
  return exclude ? !listed : listed;
}

Result<std::string> ChooseAddressFrom(const std::vector<Interface>& interfaces,
                                      const std::string& ifname_spec, const std::string& family) {
  int wanted_family = 0;
  if (family == "AF_INET") {
    wanted_family = AF_INET;
  } else if (family == "AF_INET6") {
    wanted_family = AF_INET6;
  } else if (!family.empty()) {
    return Status::InvalidArgument("socket family '" + family +
                                   "' is neither AF_INET nor AF_INET6");
  }
  const Interface* best = nullptr;
  auto rank = [](const Interface& itf) {
    // Lower is better: tier first, then IPv4 before IPv6 (getifaddrs order breaks ties).
    return static_cast<int>(TierOf(itf)) * 2 + (itf.family == AF_INET ? 0 : 1);
  };
  for (const Interface& itf : interfaces) {
    if (!itf.up || itf.link_local) continue;
    if (wanted_family != 0 && itf.family != wanted_family) continue;
    if (!MatchesIfnameSpec(ifname_spec, itf.name)) continue;
    if (best == nullptr || rank(itf) < rank(*best)) best = &itf;
  }
  if (best != nullptr) return best->address;
  std::string what = family.empty() ? "an IPv4 or IPv6 address" : "an " + family + " address";
  if (!Trim(ifname_spec).empty()) {
    return Status::InvalidArgument("no interface matching BRAID_SOCKET_IFNAME='" + ifname_spec +
                                   "' has " + what + "; interfaces seen: " +
                                   Describe(interfaces));
  }
  return Status::SystemError("no usable interface has " + what +
                             "; interfaces seen: " + Describe(interfaces));
}

Result<std::string> ChooseAddress(const std::string& ifname_spec, const std::string& family) {
  BRAID_ASSIGN_OR_RETURN(std::vector<Interface> interfaces, ListInterfaces());
  return ChooseAddressFrom(interfaces, ifname_spec, family);
}

}  // namespace braid
