// ChannelLock: the lock of one side (send or receive) of a shm channel.
//
// Why not std::mutex: each side's lock is taken once per post and once per progress step, and is
// almost never contended (the rank's own thread posts and waits; the control thread and other
// threads of the rank step in rarely). pthread_mutex_lock + unlock cost ~55 instructions and two
// locked instructions per use, four uses per 2-rank small allreduce; this lock costs one locked
// exchange and a plain store.
//
// Contended, the waiter spins briefly (the holder usually finishes a ring step within
// microseconds), then yields, then naps, because a holder may copy a large message for
// milliseconds (a ring's worth, or a single-copy read of the peer's buffer) or be preempted on an
// oversubscribed host: the waiter then costs its peers little.
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>

#include "transport/wait_budget.h"

namespace braid::transport::shm {

class ChannelLock {
 public:
  void lock() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    LockContended();
  }
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  void LockContended() {
    for (int attempt = 0;; ++attempt) {
      if (attempt < 100) {
        CpuRelax();
      } else if (attempt < 1000) {
        sched_yield();
      } else {
        const timespec nap{0, 50'000};  // 50 us: long holds are copies of many microseconds
        nanosleep(&nap, nullptr);
      }
      if (try_lock()) return;
    }
  }

  std::atomic<bool> locked_{false};
};

}  // namespace braid::transport::shm
