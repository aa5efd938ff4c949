// LightLock: a lock for locks taken on every message or every operation and almost never
// contended: each side (send, receive) of a shm channel, and a communicator's operation lock.
//
// Why not std::mutex: pthread_mutex_lock + unlock cost ~55-80 instructions and two locked
// instructions per use, and a 2-rank small allreduce takes such locks five times; this lock costs
// one locked exchange and a plain store. (The rank's own thread posts, waits and calls
// collectives; the control thread, other threads of the rank, or a second thread calling into
// the same communicator step in rarely.)
//
// Contended, the waiter spins briefly (the holder usually finishes a ring step within
// microseconds), then yields, then naps, because a holder may copy a large message for
// milliseconds (a ring's worth, or a single-copy read of the peer's buffer), run a whole
// collective (the operation lock), or be preempted on an oversubscribed host: the waiter then
// costs its peers little.
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>

#include "core/base/cpu_relax.h"

namespace braid {

class LightLock {
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

}  // namespace braid
