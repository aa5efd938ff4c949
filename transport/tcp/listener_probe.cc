// Probing a peer's TCP listener (see listener_probe.h for why).
#include "transport/tcp/listener_probe.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace braid::transport::tcp {

ListenerProbe ProbeListener(const std::string& ip, uint16_t port, int timeout_ms) {
  ListenerProbe probe;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;  // never a DNS lookup
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(ip.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    probe.detail = "cannot parse " + ip + ": " + ::gai_strerror(rc);
    return probe;
  }
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    probe.detail = std::string("socket: ") + std::strerror(errno);
    ::freeaddrinfo(found);
    return probe;
  }
  int error = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 ? 0 : errno;
  ::freeaddrinfo(found);
  if (error == EINPROGRESS || error == EINTR) {
    pollfd pfd{fd, POLLOUT, 0};
    int ready = ::poll(&pfd, 1, timeout_ms);
    if (ready > 0) {
      socklen_t length = sizeof(error);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    } else {
      error = ready == 0 ? ETIMEDOUT : errno;
    }
  }
  // A plain close (FIN, not RST): the listener sees end of file before any byte, which it treats
  // as a probe.
  ::close(fd);
  if (error == 0) {
    probe.result = ProbeResult::kListening;
  } else {
    probe.result = error == ECONNREFUSED ? ProbeResult::kRefused : ProbeResult::kUnknown;
    probe.detail = std::strerror(error);
  }
  return probe;
}

}  // namespace braid::transport::tcp
