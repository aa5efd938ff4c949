// Abstract Unix socket helpers (see unix_socket.h for why abstract names).
#include "transport/shm/unix_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace braid::transport::shm {
namespace {

socklen_t AbstractAddress(const std::string& name, sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  size_t length = std::min(name.size(), sizeof(address->sun_path) - 1);
  std::memcpy(address->sun_path + 1, name.data(), length);  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
}

}  // namespace

Result<int> ListenAbstract(const std::string& name) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::SystemError(std::string("socket(AF_UNIX): ") + std::strerror(errno));
  sockaddr_un address;
  socklen_t length = AbstractAddress(name, &address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd, 128) != 0) {
    Status status =
        Status::SystemError("listening on abstract socket @" + name + ": " + std::strerror(errno));
    ::close(fd);
    return status;
  }
  return fd;
}

int ConnectAbstract(const std::string& name) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un address;
  socklen_t length = AbstractAddress(name, &address);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  return fd;
}

Listening ProbeAbstract(const std::string& name, std::string* detail) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *detail = std::string("socket(AF_UNIX): ") + std::strerror(errno);
    return Listening::kUnknown;
  }
  sockaddr_un address;
  socklen_t length = AbstractAddress(name, &address);
  int error = ::connect(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 ? 0 : errno;
  ::close(fd);
  *detail = error == 0 ? "" : std::strerror(error);
  if (error == 0 || error == EAGAIN) return Listening::kYes;  // EAGAIN: its backlog is full
  return error == ECONNREFUSED ? Listening::kNobody : Listening::kUnknown;
}

bool SendFrame(int fd, const void* data, size_t bytes, int pass_fd) {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
  }
  ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  return sent == static_cast<ssize_t>(bytes);
}

ssize_t RecvFrame(int fd, void* data, size_t capacity, int* received_fd, bool* truncated) {
  *received_fd = -1;
  *truncated = false;
  iovec iov{data, capacity};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return -1;
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) *truncated = true;
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      if (*received_fd < 0) {
        *received_fd = passed;
      } else {
        ::close(passed);  // a stranger's extra descriptors are not kept
        *truncated = true;
      }
    }
  }
  return n;
}

pid_t PeerPid(int fd) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) return -1;
  return cred.pid;
}

Result<size_t> RecvFrameBy(int socket, void* data, size_t capacity, int* fd, Deadline deadline,
                           const std::function<Status()>& aborted, const std::string& what) {
  for (;;) {
    bool truncated = false;
    const ssize_t got = RecvFrame(socket, data, capacity, fd, &truncated);
    if (got > 0) {
      if (truncated) return Status::RemoteError(what + ": a frame too large");
      return static_cast<size_t>(got);
    }
    if (got == 0) return Status::RemoteError(what + ": the peer closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Status::RemoteError(what + ": " + std::strerror(errno));
    }
    BRAID_RETURN_IF_ERROR(aborted());
    if (deadline.Expired()) return Status::Timeout(what + ": nothing within the deadline");
    pollfd p{socket, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(deadline.RemainingMs() + 1, 50)));
  }
}

Status SendAll(int socket, const void* data, size_t bytes, int fd, const std::string& what) {
  for (int tries = 0; tries < 1000; ++tries) {
    if (SendFrame(socket, data, bytes, fd)) return Status::Ok();
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Status::RemoteError(what + ": " + std::strerror(errno));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::RemoteError(what + ": the socket stayed full");
}

}  // namespace braid::transport::shm
