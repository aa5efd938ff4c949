// Inbox: the memory of one direction of a cuda_ipc link, as mapped in one process. The receiver
// makes it (a device staging ring from Device::AllocateShareable and a host control block,
// wire.h) and offers it to the sender, who maps both and writes into them.
//
// Why the receiver owns it: what a sender finished writing stays readable by the receiver after
// the sender exits or closes, so messages sent before a peer left are still delivered.
// Why the control block is host memory: the hosts match tags, probe and see completions by
// reading headers and cursors without a stream round trip, while the streams still write the
// cursors in order with their copies (stream memory operations on registered host memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/base/status.h"
#include "core/device/device.h"
#include "transport/cuda_ipc/wire.h"

namespace braid::transport::cuda_ipc {

class Inbox {
 public:
  // Makes an inbox with a ring of at least `ring_bytes` (rounded up by the device).
  static Result<std::shared_ptr<Inbox>> Create(device::Device& device, size_t ring_bytes);
  // Maps a peer's inbox from the descriptors it offered (not taken: the caller closes them).
  static Result<std::shared_ptr<Inbox>> Import(device::Device& device, int data_fd, size_t data_bytes,
                                               int control_fd, size_t control_bytes);
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  uint8_t* ring() const { return static_cast<uint8_t*>(data_->data()); }
  uint64_t ring_bytes() const { return data_->size(); }
  Control* control() const { return control_; }
  size_t control_bytes() const { return control_bytes_; }

  // New descriptors for the peer (the caller closes them once sent). Only for Create's inboxes.
  Result<int> ExportData(device::Device& device) const;
  Result<int> ExportControl() const;

  // Threads of one process share the inbox object itself: Publish keeps it under a token the
  // peer thread's Claim takes (once). Withdraw drops an unclaimed one (a failed Connect).
  static uint64_t Publish(std::shared_ptr<Inbox> inbox);
  static std::shared_ptr<Inbox> Claim(uint64_t token);
  static void Withdraw(uint64_t token);

 private:
  Inbox() = default;
  std::unique_ptr<device::Memory> data_;
  Control* control_ = nullptr;  // mmap of the control memfd
  size_t control_bytes_ = 0;
  int control_fd_ = -1;  // Create's: exported on demand
  std::unique_ptr<device::Memory> registration_;  // RegisterHost of the control block
};

}  // namespace braid::transport::cuda_ipc
