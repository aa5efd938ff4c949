// RequestPool: recycles the driven Requests of one side of a connection, so that a post that
// cannot finish on the spot (a receive whose message has not arrived yet, the common case of an
// exchange) costs no heap allocation.
//
// Why: RequestPtr is a std::shared_ptr (algorithms hold and drop requests as they please), and a
// fresh Request per post meant a malloc/free pair, building and destroying a mutex, a condition
// variable and a Status the driven request never uses, and taking and dropping a reference on
// the driver: ~100 instructions and two locked instructions of a 2-rank 8-byte allreduce's ~2800.
//
// A pooled request is handed out again only once it is done and the pool holds the only
// reference to it: every user and the transport's own queues have let go, so nobody can read its
// old status or see it reset. Holders that let go on other threads do so with an acquire-release
// decrement, and Acquire reads the count before an acquire fence, so their last reads of the
// request happen before the reset.
//
// Thread safety: none; the owner serialises Acquire and Clear (the shm channel: under the lock of
// the side that posts). Ownership: pooled requests own their driver; a driver that owns its pool
// must Clear() it when it shuts down, or the cycle keeps both alive.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "transport/connection.h"

namespace braid::transport {

class RequestPool {
 public:
  // Requests kept for reuse; more than this many outstanding at once are allocated and dropped
  // as before (a ring allreduce posts up to 4 receives ahead per connection).
  static constexpr size_t kCapacity = 8;

  // A pending request: a recycled one if any is free, else `make_request()` (kept for reuse while
  // the pool has room). `make_request` returns a new pending RequestPtr.
  template <typename MakeRequest>
  RequestPtr Acquire(MakeRequest make_request) {
    for (RequestPtr& slot : slots_) {
      if (slot.use_count() == 1 && slot->IsDone()) {
        std::atomic_thread_fence(std::memory_order_acquire);  // see the top of the file
        slot->Reset();
        return slot;
      }
    }
    RequestPtr fresh = make_request();
    if (slots_.size() < kCapacity) slots_.push_back(fresh);
    return fresh;
  }

  // Drops the pool's references (requests still held elsewhere live on, unpooled).
  void Clear() { slots_.clear(); }
  size_t size() const { return slots_.size(); }

 private:
  std::vector<RequestPtr> slots_;
};

}  // namespace braid::transport
