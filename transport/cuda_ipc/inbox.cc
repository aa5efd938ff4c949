#include "transport/cuda_ipc/inbox.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>

namespace braid::transport::cuda_ipc {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

size_t ControlMappingBytes() { return (sizeof(Control) + 4095) / 4096 * 4096; }

std::mutex published_mutex;  // a leaf
std::map<uint64_t, std::shared_ptr<Inbox>>& Published() {
  static auto* published = new std::map<uint64_t, std::shared_ptr<Inbox>>();
  return *published;
}

}  // namespace

Result<std::shared_ptr<Inbox>> Inbox::Create(device::Device& device, size_t ring_bytes) {
  std::shared_ptr<Inbox> inbox(new Inbox());
  BRAID_ASSIGN_OR_RETURN(inbox->data_, device.AllocateShareable(ring_bytes));
  inbox->control_bytes_ = ControlMappingBytes();
  inbox->control_fd_ = memfd_create("braid-cuda-ipc-control", MFD_CLOEXEC);
  if (inbox->control_fd_ < 0) return Status::SystemError(Errno("cuda_ipc: memfd_create for a control block"));
  if (ftruncate(inbox->control_fd_, static_cast<off_t>(inbox->control_bytes_)) != 0) {
    return Status::SystemError(Errno("cuda_ipc: sizing a control block"));
  }
  void* map = mmap(nullptr, inbox->control_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, inbox->control_fd_, 0);
  if (map == MAP_FAILED) return Status::SystemError(Errno("cuda_ipc: mapping a control block"));
  inbox->control_ = new (map) Control();
  BRAID_ASSIGN_OR_RETURN(inbox->registration_, device.RegisterHost(map, inbox->control_bytes_));
  return inbox;
}

Result<std::shared_ptr<Inbox>> Inbox::Import(device::Device& device, int data_fd, size_t data_bytes, int control_fd,
                                             size_t control_bytes) {
  if (control_bytes != ControlMappingBytes()) {
    return Status::InvalidArgument("cuda_ipc: the peer's control block has " + std::to_string(control_bytes) +
                                   " bytes, this build's has " + std::to_string(ControlMappingBytes()));
  }
  struct stat st;
  if (fstat(control_fd, &st) != 0 || static_cast<size_t>(st.st_size) != control_bytes) {
    return Status::InvalidArgument("cuda_ipc: the peer's control descriptor is not a control block of " +
                                   std::to_string(control_bytes) + " bytes");
  }
  std::shared_ptr<Inbox> inbox(new Inbox());
  BRAID_ASSIGN_OR_RETURN(inbox->data_, device.ImportFd(data_fd, data_bytes));
  void* map = mmap(nullptr, control_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, control_fd, 0);
  if (map == MAP_FAILED) return Status::SystemError(Errno("cuda_ipc: mapping the peer's control block"));
  inbox->control_ = static_cast<Control*>(map);
  inbox->control_bytes_ = control_bytes;
  if (inbox->control_->magic != kOfferMagic || inbox->control_->version != kOfferVersion) {
    return Status::InvalidArgument("cuda_ipc: the peer's control block has another magic or version");
  }
  BRAID_ASSIGN_OR_RETURN(inbox->registration_, device.RegisterHost(map, control_bytes));
  return inbox;
}

Inbox::~Inbox() {
  registration_.reset();  // unregister before unmapping
  if (control_ != nullptr) munmap(control_, control_bytes_);
  if (control_fd_ >= 0) close(control_fd_);
}

Result<int> Inbox::ExportData(device::Device& device) const { return device.ExportFd(*data_); }

Result<int> Inbox::ExportControl() const {
  if (control_fd_ < 0) return Status::Internal("cuda_ipc: exporting an inbox this process did not make");
  const int fd = fcntl(control_fd_, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Status::SystemError(Errno("cuda_ipc: duplicating a control descriptor"));
  return fd;
}

uint64_t Inbox::Publish(std::shared_ptr<Inbox> inbox) {
  static std::atomic<uint64_t> next{1};
  const uint64_t token = (static_cast<uint64_t>(getpid()) << 32) | next.fetch_add(1);
  std::lock_guard<std::mutex> lock(published_mutex);
  Published()[token] = std::move(inbox);
  return token;
}

std::shared_ptr<Inbox> Inbox::Claim(uint64_t token) {
  std::lock_guard<std::mutex> lock(published_mutex);
  auto it = Published().find(token);
  if (it == Published().end()) return nullptr;
  std::shared_ptr<Inbox> inbox = std::move(it->second);
  Published().erase(it);
  return inbox;
}

void Inbox::Withdraw(uint64_t token) { Claim(token); }

}  // namespace braid::transport::cuda_ipc
