// StalledSends: the channels of one shm transport whose sends wait for ring space.
//
// Why: nothing but the sending rank (or, as a backstop, its transport's control thread) can push
// a queued send into the ring. A ring allreduce waits on its left neighbour's connection while
// its send to the right neighbour waits for space, so a waiter must push the other connections'
// stalled sends too, not only those of the connection it waits on. And a rank may block on
// something that is not shm at all (a TCP receive in a ring that spans hosts), so the control
// thread checks the list every millisecond and pushes a channel nobody has pushed since the last
// check; from then on the consumer's doorbell drives it at full speed.
//
// Cost on the fast path: one relaxed load (Any()) per poll; the list and its mutex are touched
// only while some send is stalled.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace braid::transport::shm {

class ShmChannel;

class StalledSends {
 public:
  // `wake_fd`: the control thread's eventfd, written when the list stops being empty while the
  // control thread is not checking it already.
  explicit StalledSends(int wake_fd) : wake_fd_(wake_fd) {}

  // Called by a channel (holding its send lock) when its queue becomes non-empty / empty.
  void Add(const std::shared_ptr<ShmChannel>& channel);
  void Remove(const ShmChannel* channel);

  bool Any() const { return count() > 0; }
  int count() const { return count_.load(std::memory_order_relaxed); }
  // Pushes the queued sends of every listed channel whose send lock is free right now. Returns
  // whether anything moved. Safe from any thread.
  bool PushAll();

  // Control thread: whether it should wake up every millisecond to check (clears the request
  // first, so a concurrent Add() either is seen by the caller's scan or kicks again).
  bool StartCheck();
  // Control thread: pushes (and arms the doorbell of) every listed channel that made no progress
  // since the previous check. Returns whether any channel is still listed.
  bool Check();
  // The transport is going away: no more kicks.
  void Detach();

 private:
  std::vector<std::shared_ptr<ShmChannel>> Snapshot();

  std::atomic<int> wake_fd_;
  std::atomic<bool> checking_{false};  // the control thread wakes every millisecond
  std::atomic<int> count_{0};
  std::mutex
      mutex_;  // guards channels_. A leaf: taken under a channel's send lock, never the reverse
  std::vector<std::weak_ptr<ShmChannel>> channels_;
};

}  // namespace braid::transport::shm
