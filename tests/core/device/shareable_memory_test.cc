// The device seam's memory shared by descriptor (device.h: AllocateShareable, ExportFd, ImportFd)
// on the CPU SIMULATION (memfd; not a GPU; tests/gpu/cuda_ipc_gpu_test covers CUDA's): sizes are
// rounded and reported, only shareable memory exports, a descriptor of the wrong size or kind is
// refused, and a descriptor passed to another process with SCM_RIGHTS maps the same bytes there
// (the child writes, the parent reads through its own mapping).
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>

#include "core/device/simulated_device.h"

namespace braid::device {
namespace {

bool SendFd(int socket, int fd) {
  char byte = 'm';
  iovec io{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  return sendmsg(socket, &msg, 0) == 1;
}

int ReceiveFd(int socket) {
  char byte = 0;
  iovec io{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(socket, &msg, 0) != 1) return -1;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (cmsg == nullptr || cmsg->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
  return fd;
}

TEST_CASE("simulated device: shareable memory sizes, exports and refusals", "[device][simulation]") {
  std::unique_ptr<Device> device = NewSimulatedDevice();
  CHECK(device->AllocateShareable(0).status().code() == Code::kInvalidArgument);
  auto shareable = device->AllocateShareable(100);
  REQUIRE(shareable.ok());
  CHECK(shareable.value()->size() >= 100);
  CHECK(shareable.value()->size() % 4096 == 0);  // rounded: callers must use size()

  auto plain = device->Allocate(4096);
  auto host = device->AllocateHost(4096);
  REQUIRE(plain.ok());
  REQUIRE(host.ok());
  CHECK(device->ExportFd(*plain.value()).status().code() == Code::kInvalidArgument);
  CHECK(device->ExportFd(*host.value()).status().code() == Code::kInvalidArgument);

  auto fd = device->ExportFd(*shareable.value());
  REQUIRE(fd.ok());
  CHECK(device->ImportFd(-1, 4096).status().code() == Code::kInvalidArgument);
  CHECK(device->ImportFd(fd.value(), 0).status().code() == Code::kInvalidArgument);
  CHECK(device->ImportFd(fd.value(), shareable.value()->size() + 4096).status().code() == Code::kInvalidArgument);
  auto again = device->ImportFd(fd.value(), shareable.value()->size());
  REQUIRE(again.ok());
  close(fd.value());  // the mapping keeps the memory
  static_cast<uint8_t*>(shareable.value()->data())[77] = 0x5A;
  CHECK(static_cast<const uint8_t*>(again.value()->data())[77] == 0x5A);
}

TEST_CASE("simulated device: a shareable descriptor passed with SCM_RIGHTS maps the same memory in "
          "another process",
          "[device][simulation]") {
  std::unique_ptr<Device> device = NewSimulatedDevice();
  auto memory = device->AllocateShareable(1 << 20);
  REQUIRE(memory.ok());
  const size_t bytes = memory.value()->size();
  int sockets[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sockets) == 0);
  const pid_t child = fork();
  if (child == 0) {
    close(sockets[0]);
    const int fd = ReceiveFd(sockets[1]);
    if (fd < 0) _exit(2);
    auto imported = NewSimulatedDevice()->ImportFd(fd, bytes);
    close(fd);
    if (!imported.ok()) _exit(3);
    auto* data = static_cast<uint8_t*>(imported.value()->data());
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 13 + 1);
    _exit(0);
  }
  close(sockets[1]);
  auto fd = device->ExportFd(*memory.value());
  REQUIRE(fd.ok());
  REQUIRE(SendFd(sockets[0], fd.value()));
  close(fd.value());
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  close(sockets[0]);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const auto* data = static_cast<const uint8_t*>(memory.value()->data());
  size_t wrong = 0;
  for (size_t i = 0; i < bytes; ++i) wrong += data[i] != static_cast<uint8_t>(i * 13 + 1);
  CHECK(wrong == 0);
}

}  // namespace
}  // namespace braid::device
