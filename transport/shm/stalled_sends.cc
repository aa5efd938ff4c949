// The transport-wide list of stalled senders (see stalled_sends.h for why it exists).
#include "transport/shm/stalled_sends.h"

#include <unistd.h>

#include <algorithm>

#include "transport/shm/shm_connection.h"

namespace braid::transport::shm {

void StalledSends::Add(const std::shared_ptr<ShmChannel>& channel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    channels_.push_back(channel);
    count_.store(static_cast<int>(channels_.size()), std::memory_order_seq_cst);
  }
  if (!checking_.exchange(true)) {
    int fd = wake_fd_.load();
    uint64_t one = 1;
    if (fd >= 0) (void)::write(fd, &one, sizeof(one));
  }
}

void StalledSends::Remove(const ShmChannel* channel) {
  std::lock_guard<std::mutex> lock(mutex_);
  channels_.erase(std::remove_if(channels_.begin(), channels_.end(),
                                 [&](const std::weak_ptr<ShmChannel>& weak) {
                                   auto locked = weak.lock();
                                   return locked == nullptr || locked.get() == channel;
                                 }),
                  channels_.end());
  count_.store(static_cast<int>(channels_.size()), std::memory_order_relaxed);
}

std::vector<std::shared_ptr<ShmChannel>> StalledSends::Snapshot() {
  std::vector<std::shared_ptr<ShmChannel>> channels;
  std::lock_guard<std::mutex> lock(mutex_);
  channels.reserve(channels_.size());
  for (const auto& weak : channels_) {
    if (auto channel = weak.lock()) channels.push_back(std::move(channel));
  }
  return channels;
}

bool StalledSends::PushAll() {
  bool moved = false;
  for (const auto& channel : Snapshot()) moved |= channel->TryPushSends();
  return moved;
}

bool StalledSends::StartCheck() {
  checking_.store(false, std::memory_order_seq_cst);
  if (count_.load(std::memory_order_seq_cst) == 0) return false;
  checking_.store(true, std::memory_order_seq_cst);
  return true;
}

bool StalledSends::Check() {
  for (const auto& channel : Snapshot()) channel->Backstop();
  return Any();
}

void StalledSends::Detach() { wake_fd_.store(-1); }

}  // namespace braid::transport::shm
