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
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "bindings/c/braid.h"

namespace braid_torch {

class BraidWork : public c10d::Work {
 public:
  // `outputs` are what the future completes with; `comm` is aborted by abort().
  BraidWork(int rank, c10d::OpType type, const char* profiling_title,
            std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs, braidComm_t comm,
            uint64_t sequence);

  // Called once by the worker: success when error is null.
  void MarkDone(std::exception_ptr error);
  // The sender of a receive: known when posted (recv), or written by the job when the message
  // arrives (recvAnysource: the job holds `cell` too).
  void SetSourceRank(int rank) { source_rank_.store(rank); }
  void ShareSourceRank(std::shared_ptr<std::atomic<int>> cell) { source_cell_ = std::move(cell); }

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
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
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The exception every failure becomes: a c10::DistBackendError (torch.distributed's
// DistBackendError in Python) with "braid <op>: " before braid's own message. A timeout reads
// "Timed out" so callers that match on it (c10d's tests do) recognise it.
std::exception_ptr MakeBraidError(const std::string& op, braidResult_t result,
                                  const std::string& message);

}  // namespace braid_torch
