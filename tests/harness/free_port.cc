#include "tests/harness/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace braid::testing {
namespace {

// The lowest ephemeral port; Linux's default range starts at 32768.
int EphemeralLow() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (range >> low >> high && low > 2048) return low;
  return 32768;
}

// Binds `port` on loopback (0: any) and returns the port bound, or -1.
int TryBind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int bound = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

}  // namespace

int FreePort() {
  const int high = EphemeralLow() - 1;
  const int low = high > 12000 ? 10000 : 1024;
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(low, high);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = TryBind(pick(random));
    if (port > 0) return port;
  }
  return TryBind(0);  // the whole range below is taken: fall back to the kernel's choice
}

}  // namespace braid::testing
