#include "braid_work.h"

#include <ATen/core/jit_type.h>
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

}  // namespace

BraidWork::BraidWork(int rank, c10d::OpType type, const char* profiling_title,
                     std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                     braidComm_t comm, uint64_t sequence)
    : Work(rank, type, profiling_title, std::optional<std::vector<at::Tensor>>(std::move(inputs))),
      outputs_(std::move(outputs)),
      comm_(comm),
      sequence_(sequence),
      future_(c10::make_intrusive<c10::ivalue::Future>(TensorListType())) {}

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

bool BraidWork::wait(std::chrono::milliseconds timeout) {
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
  lock.unlock();
  future_->wait();  // marked right after completed_ (MarkDone)
  return true;
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
