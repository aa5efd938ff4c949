// BraidWork: the c10d::Work of one braid operation (or one coalesced batch).
//
// Contract (what c10d's callers rely on):
// - Created by the Python-facing thread, completed exactly once by the process group's worker
//   thread (JobQueue) through MarkDone; every other method is thread-safe.
// - getFuture() completes with the output tensors (DDP's reducer and every comm hook read them);
//   on failure it holds the same exception that wait() throws.
// - wait(timeout) blocks at most `timeout` (kNoTimeout: until done) and throws a DistBackendError
//   on timeout or failure; the message is braid's, which names the ranks concerned.
// - abort() aborts the whole communicator (braid cannot cancel one operation), as NCCL's does.
// - A CUDA operation (made with the group's stream, see device_streams.h) has ProcessGroupNCCL's
//   semantics instead: it is done, for wait(), once its braid call has been queued on the
//   group's stream (MarkQueued); wait() then makes the caller's current stream wait for it
//   (no host block on the GPU work) and raises an error the communicator reported since;
//   isCompleted() asks whether the GPU has finished it; the future completes with the outputs
//   at MarkQueued, under the group's stream, so torch orders its callbacks after the work.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "bindings/c/braid.h"

namespace braid_torch {

class BraidWork : public c10d::Work {
 public:
  // `outputs` are what the future completes with; `comm` is aborted by abort(). `stream`: the
  // group's stream of a CUDA operation; none for a CPU one.
  BraidWork(int rank, c10d::OpType type, const char* profiling_title,
            std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs, braidComm_t comm,
            uint64_t sequence, std::optional<c10::Stream> stream = std::nullopt);

  // Called once by the worker: success when error is null. For a CUDA operation, success is
  // MarkQueued instead.
  void MarkDone(std::exception_ptr error);
  // A CUDA operation whose braid calls were queued on the group's stream: records the event
  // wait() hands to the caller's stream and completes the Work and its future.
  void MarkQueued();
  bool on_cuda() const { return stream_.has_value(); }
  // The sender of a receive: known when posted (recv), or written by the job when the message
  // arrives (recvAnysource: the job holds `cell` too).
  void SetSourceRank(int rank) { source_rank_.store(rank); }
  void ShareSourceRank(std::shared_ptr<std::atomic<int>> cell) { source_cell_ = std::move(cell); }

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  bool isCompleted() override;
  void synchronize() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  uint64_t getSequencenumber() const override { return sequence_; }

 private:
  const std::vector<at::Tensor> outputs_;
  const braidComm_t comm_;
  const uint64_t sequence_;
  std::atomic<int> source_rank_{-1};
  std::shared_ptr<std::atomic<int>> source_cell_;  // set before the Work reaches its caller
  const std::optional<c10::Stream> stream_;
  // Recorded on stream_ by MarkQueued (before completed_ is set, under mutex_); read after.
  std::optional<c10::Event> queued_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;

  // Waits (host) at most `timeout` until the worker has completed the Work; rethrows its error.
  void WaitCompleted(std::chrono::milliseconds timeout);
};

// The exception every failure becomes: a c10::DistBackendError (torch.distributed's
// DistBackendError in Python) with "braid <op>: " before braid's own message. A timeout reads
// "Timed out" so callers that match on it (c10d's tests do) recognise it.
std::exception_ptr MakeBraidError(const std::string& op, braidResult_t result,
                                  const std::string& message);

}  // namespace braid_torch
