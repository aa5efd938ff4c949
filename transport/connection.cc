#include "transport/connection.h"

#include <atomic>
#include <chrono>
#include <memory>
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

namespace {

// The default PostRecvInto: the message is received whole into a staging buffer by a plain
// PostRecv (the inner request), and handed to the sink by whichever thread first finds the inner
// request complete through the outer request's Test() or Wait(). The outer request is driven by
// this object, so no thread of the transport ever calls the sink.
class StagedLanding : public RequestDriver {
 public:
  StagedLanding(size_t bytes, std::shared_ptr<LandingSink> sink)
      : staging_(bytes > 0 ? new char[bytes] : nullptr), bytes_(bytes), sink_(std::move(sink)) {}
  StagedLanding(const StagedLanding&) = delete;
  StagedLanding& operator=(const StagedLanding&) = delete;
  ~StagedLanding() override {
    // Dropped while its receive is still pending (only after a failure: an algorithm that gave
    // up on a collective drops its requests before the communicator breaks the links): the
    // transport may still write into the staging buffer until then, so it is let go of rather
    // than freed. One buffer per receive abandoned on a broken link.
    if (inner_ != nullptr && !inner_->IsDone()) (void)staging_.release();
  }

  // Posts the inner receive; `outer` is the request this driver completes (it owns this object).
  void Start(Connection& connection, uint64_t tag, Request* outer) {
    outer_ = outer;
    inner_ = connection.PostRecv(staging_.get(), bytes_, tag);
  }

  void Progress() override {
    if (inner_->Test()) Finish(inner_->status());
  }

  Status Wait(const Request& request, Deadline deadline) override {
    Status status = inner_->Wait(deadline);
    if (!inner_->IsDone()) return status;  // timed out: both stay pending
    Finish(inner_->status());
    // Another thread may have claimed the hand-over and be running the sink.
    while (!request.IsDone()) std::this_thread::yield();
    return request.status().ok() ? Status::Ok() : request.status();
  }

 private:
  // Hands the message over (if it arrived) and completes the outer request, once.
  void Finish(const Status& status) {
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
    if (status.ok() && bytes_ > 0) sink_->Land(0, staging_.get(), bytes_);
    sink_.reset();  // the sink is called no more
    outer_->Complete(status.ok() ? Status::Ok() : status);
  }

  std::unique_ptr<char[]> staging_;
  const size_t bytes_;
  std::shared_ptr<LandingSink> sink_;  // only the claiming thread touches it after Start
  Request* outer_ = nullptr;
  RequestPtr inner_;
  std::atomic<bool> claimed_{false};
};

}  // namespace

RequestPtr Connection::PostRecvInto(size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink) {
  auto landing = std::make_shared<StagedLanding>(bytes, std::move(sink));
  auto request = std::make_shared<Request>(landing);
  landing->Start(*this, tag, request.get());
  return request;
}

Result<std::optional<Connection::Incoming>> Connection::Probe() {
  return Status::Internal("the connection to rank " + std::to_string(peer()) +
                          " cannot look at an incoming message before receiving it (Probe)");
}

Status Connection::ReadPeerMemory(uint64_t /*address*/, void* /*destination*/, size_t bytes) {
  return Status::InvalidUsage("the connection to rank " + std::to_string(peer()) +
                              " cannot read the peer's memory (asked for " +
                              std::to_string(bytes) + " bytes)");
}

}  // namespace braid::transport
