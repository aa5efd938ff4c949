#include "braid_work.h"

#include <ATen/core/jit_type.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace braid_torch {

std::exception_ptr MakeBraidError(const std::string& op, braidResult_t result,
                                  const std::string& message) {
  std::string text = "braid " + op + " failed: ";
  if (result == braidTimeout) text += "Timed out (braidTimeout): ";
  else text += std::string(braidGetErrorString(result)) + ": ";
  text += message;
  return std::make_exception_ptr(
      c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, uint32_t(__LINE__)}, text));
}

namespace {

// The future's element type, made once: creating a ListType allocates, and every operation makes
// a future.
const c10::TypePtr& TensorListType() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}

std::vector<c10::Device> FutureDevices(const std::optional<c10::Stream>& stream) {
  if (!stream) return {};
  return {stream->device()};
}

}  // namespace

BraidWork::BraidWork(int rank, c10d::OpType type, const char* profiling_title,
                     std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                     braidComm_t comm, uint64_t sequence, std::optional<c10::Stream> stream)
    : Work(rank, type, profiling_title, std::optional<std::vector<at::Tensor>>(std::move(inputs))),
      outputs_(std::move(outputs)),
      comm_(comm),
      sequence_(sequence),
      stream_(stream),
      future_(c10::make_intrusive<c10::ivalue::Future>(TensorListType(), FutureDevices(stream))) {}

void BraidWork::MarkQueued() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_.emplace(c10::DeviceType::CUDA);
    queued_->record(*stream_);
  }
  finish(nullptr);
  // Under the group's stream: a CUDA future records its own events on the current stream.
  c10::StreamGuard guard(*stream_);
  future_->markCompleted(c10::IValue(outputs_));
}

void BraidWork::MarkDone(std::exception_ptr error) {
  // The Work first, then the future: whoever sees the future done (DDP, comm hooks) then also
  // sees isCompleted(); wait() waits for the future as well, so both orders of observation agree.
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

void BraidWork::WaitCompleted(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [this] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
    std::rethrow_exception(MakeBraidError(
        c10d::opTypeToString(retrieveOpType()), braidTimeout,
        "Work.wait(timeout=" + std::to_string(timeout.count()) +
            " ms) expired before operation #" + std::to_string(sequence_) + " of rank " +
            std::to_string(rank_) + " completed; the operation itself keeps running until the "
            "process group's timeout"));
  }
  if (exception_) std::rethrow_exception(exception_);
}

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  WaitCompleted(timeout);
  if (!stream_) {
    future_->wait();  // marked right after completed_ (MarkDone)
    return true;
  }
  // The caller's current stream on the work's device waits for the work; the host does not.
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  queued_->block(impl.getStream(stream_->device()));
  // A failure of work already queued (a lost peer, a timeout, an abort) reaches the
  // communicator's async error; report it to the waiter who can see it now.
  braidResult_t async = braidSuccess;
  if (braidCommGetAsyncError(comm_, &async) == braidSuccess && async != braidSuccess &&
      async != braidInProgress) {
    std::rethrow_exception(MakeBraidError(c10d::opTypeToString(retrieveOpType()), async,
                                          braidGetLastError(comm_)));
  }
  return true;
}

bool BraidWork::isCompleted() {
  if (!stream_) return Work::isCompleted();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!completed_) return false;
  if (exception_ || !queued_) return true;
  return queued_->query();
}

void BraidWork::synchronize() {
  if (stream_) wait(kNoTimeout);
}

void BraidWork::abort() { braidCommAbort(comm_); }

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() { return future_; }

std::vector<at::Tensor> BraidWork::result() { return outputs_; }

int BraidWork::sourceRank() const {
  int rank = source_cell_ ? source_cell_->load() : source_rank_.load();
  TORCH_CHECK(rank >= 0, "braid: sourceRank() is only defined for a completed recv from any source");
  return rank;
}

}  // namespace braid_torch
