#include "transport/connection.h"

#include <chrono>
#include <thread>

namespace braid::transport {

Status Request::Wait(Deadline deadline) {
  // Spin briefly before sleeping: a sleeping wake-up costs tens of microseconds on small VMs,
  // and small messages usually complete within that window.
  constexpr int kSpinIterations = 2000;
  for (int i = 0; i < kSpinIterations; ++i) {
    if (Test()) return status_;
    if (i > 200) std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (!Test()) {
    if (deadline.when() == Deadline::Clock::time_point::max()) {
      done_cv_.wait(lock);
    } else if (done_cv_.wait_until(lock, deadline.when()) == std::cv_status::timeout && !Test()) {
      return Status::Timeout("request did not complete before the deadline");
    }
  }
  return status_;
}

void Request::Complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Test()) return;
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

}  // namespace braid::transport
