// Abstract-namespace Unix sockets for the shm transport's handshake and liveness.
//
// Why abstract names: they vanish with the last descriptor, so a killed rank leaves nothing in
// the file system, and no directory permissions or stale socket files can get in the way.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>

#include "core/base/deadline.h"
#include "core/base/status.h"

namespace braid::transport::shm {

// Listens on abstract name `name` (SOCK_SEQPACKET, non-blocking, close-on-exec).
Result<int> ListenAbstract(const std::string& name);
// Connects to abstract name `name` (blocking connect, then non-blocking). Returns the socket or
// -1 with errno set (ECONNREFUSED when nobody listens there).
int ConnectAbstract(const std::string& name);
// Whether anybody listens on abstract name `name`, without blocking: a connection is made and
// closed at once (the listener sees end of file before any byte). The name of a rank's listener
// lives exactly as long as its transport, so kNobody means the rank's process is gone.
enum class Listening { kYes, kNobody, kUnknown };
Listening ProbeAbstract(const std::string& name, std::string* detail);
// Sends one frame, with `pass_fd` attached when >= 0. Non-blocking; false with errno on failure.
bool SendFrame(int fd, const void* data, size_t bytes, int pass_fd = -1);
// Receives one frame into `data` (up to `capacity` bytes) and at most one passed descriptor
// (`*received_fd`, -1 if none; any other descriptors are closed). Returns the frame's size, 0 at
// end of file, -1 with errno (EAGAIN: nothing yet). `*truncated` says the frame or its control
// data did not fit.
ssize_t RecvFrame(int fd, void* data, size_t capacity, int* received_fd, bool* truncated);
// Receives one frame (and at most one descriptor, as RecvFrame) within the deadline, polling so
// that an abort (`aborted` returning non-OK) or a peer that closes ends the wait. Errors name
// `what`: kRemoteError when the peer closed or the frame did not fit, kTimeout at the deadline.
Result<size_t> RecvFrameBy(int socket, void* data, size_t capacity, int* fd, Deadline deadline,
                           const std::function<Status()>& aborted, const std::string& what);
// Sends one frame (with `fd` attached when >= 0), retrying for up to a second while the socket
// is full; kRemoteError naming `what` otherwise.
Status SendAll(int socket, const void* data, size_t bytes, int fd, const std::string& what);
// The pid of the process at the other end (SO_PEERCRED, in this process's pid namespace), or -1.
pid_t PeerPid(int fd);

}  // namespace braid::transport::shm
