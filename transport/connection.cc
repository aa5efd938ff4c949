#include "transport/connection.h"

#include <chrono>
#include <string>
#include <thread>

namespace braid::transport {

Status Request::Wait(Deadline deadline) {
  // Already done (say a small send that went straight into a shared-memory ring, the common case
  // on the per-message path): OK without copying the status.
  if (IsDone()) return status_.ok() ? Status::Ok() : status_;
  if (driver_ != nullptr) return driver_->Wait(*this, deadline);
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
  if (driver_ != nullptr) {
    // Nobody sleeps on done_cv_ for a driven request; skip the mutex (this runs once per message
    // on the shared-memory fast path).
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (IsDone()) return;
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

void Request::Reset() {
  status_ = Status::Ok();
  claimed_.store(false, std::memory_order_relaxed);
  done_.store(false, std::memory_order_relaxed);
}

Status Connection::SendRecv(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                            uint64_t tag, Deadline deadline, Half* failed) {
  RequestPtr recv_request, send_request;
  // The send is posted first: both partners wait for each other's message, so the time a rank
  // spends between its partner's data landing and its own send leaving is paid by the partner.
  // A message that arrives before its receive is posted waits in the connection.
  if (send_bytes > 0) send_request = PostSend(send, send_bytes, tag);
  if (recv_bytes > 0) recv_request = PostRecv(recv, recv_bytes, tag);
  if (recv_request) {
    Status status = recv_request->Wait(deadline);
    if (!status.ok()) {
      *failed = Half::kReceive;
      return status;
    }
  }
  if (send_request) {
    Status status = send_request->Wait(deadline);
    if (!status.ok()) {
      *failed = Half::kSend;
      return status;
    }
  }
  return Status::Ok();
}

RequestPtr Connection::PostRecvReduce(void*, size_t, uint64_t, const ReduceOnReceive&) {
  auto request = std::make_shared<Request>();
  request->Complete(Status::Internal("the connection to rank " + std::to_string(peer()) +
                                     " cannot reduce on receive (check ReducesOnReceive first)"));
  return request;
}

Result<std::optional<Connection::Incoming>> Connection::Probe() {
  return Status::Internal("the connection to rank " + std::to_string(peer()) +
                          " cannot look at an incoming message before receiving it (Probe)");
}

}  // namespace braid::transport
