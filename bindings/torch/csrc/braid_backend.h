// BraidBackend: a c10d::Backend over braid.h, the process-group half of braid_torch.
//
// Shape: every operation checks its arguments on the calling thread (a bad argument raises
// there, nothing is queued), then queues a Job on the group's JobQueue and returns a BraidWork
// at once (CUDA tensors: ProcessGroupNCCL's stream semantics, see device_streams.h); the worker makes the braid calls in issue order with no GIL held and completes the
// Work and its future. Collectives move contiguous buffers: a non-contiguous tensor is staged
// through a contiguous copy. Operations that only move data (broadcast, gathers, scatters,
// all-to-all, send/recv) move raw bytes, so every dtype works; reductions need a braid dtype.
//
// Rendezvous: the c10d store (already private to this group and device) carries one thing, the
// braidUniqueId that the group's rank 0 makes; the data path never touches it. monitoredBarrier
// also goes through the store, because it must name the ranks that did not arrive even when the
// communicator itself is stuck.
//
// Names: c10d 2.15 renamed several methods (all_gather_single, ...) and keeps the old names as
// forwarding aliases; this class overrides the long-standing names so it builds against 2.13-2.15.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "bindings/c/braid.h"
#include "braid_work.h"
#include "device_streams.h"
#include "job_queue.h"
#include "tensor_types.h"

namespace braid_torch {

class BraidBackend : public c10d::Backend {
 public:
  // Blocks until every rank of the group has joined (or `timeout`): rank 0 makes a unique id
  // and publishes it through `store`, every rank creates its braid communicator with `timeout`
  // as braid's deadline. `name` is the name PyTorch knows the backend by ("braid"; the tests
  // also register it in Gloo's slot) and prefixes profiler events, as "gloo:send" does.
  BraidBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
               std::chrono::milliseconds timeout, std::string name);
  // A group made from an existing braid communicator, as Split* below make them; `store` (the
  // new group's) serves monitoredBarrier. Takes ownership of `comm`.
  BraidBackend(braidComm_t comm, c10::intrusive_ptr<c10d::Store> store, int rank, int size,
               std::chrono::milliseconds timeout, std::string name);
  ~BraidBackend() override;

  const std::string getBackendName() const override { return name_; }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  // The options a split child starts from (ProcessGroup::splitGroup copies and edits them).
  c10::intrusive_ptr<Options> getBackendOptions() override;

  // Splitting: a subgroup made by braidCommSplit over this group's communicator, collective over
  // every rank of this group (members and non-members alike, as ncclCommSplit), with no store
  // rendezvous. Earlier operations of this rank complete first (the split is ordered after them).
  bool supportsSplitting() const override { return true; }
  // torch.distributed.split_group: every rank passes the ranks (of this group) of the subgroup it
  // belongs to, or of the first subgroup when it belongs to none; a rank not in `ranks` takes
  // part and gets nullptr. The child's rank is the position in `ranks`.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // new_group when PyTorch passes split_from (the default group was bound to a device): a member
  // makes its child from the subgroup's ranks in this group and its rank there ...
  c10::intrusive_ptr<BraidBackend> SplitMember(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::vector<int64_t>& ranks, int rank,
                                               std::chrono::milliseconds timeout);
  // ... and a non-member takes part without a child (torch's perform_nocolor_split).
  void SplitNonMember();
  // c10d's per-group operation count (its debug checks compare it across ranks): every rank
  // issues the same operations, so counting them locally agrees everywhere.
  void setSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    next_sequence_ = 0;
  }
  uint64_t getSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    return next_sequence_;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Waits for every earlier operation of this rank, then meets the other ranks through the
  // store: rank 0 waits for each rank up to `opts.timeout` and raises naming the first that did
  // not arrive ("Rank 2 failed to pass monitoredBarrier ..."), or all of them with
  // wait_all_ranks; the other ranks raise with rank 0's verdict.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // Wakes every blocked braid call of this group at once; later operations fail.
  void abort() override;
  // Completes queued operations, then releases the communicator and its links.
  void shutdown() override;

 private:
  // How an operation may run: on the worker, possibly grouped with neighbouring point-to-point
  // operations, or (a synchronous call, async_op=False, with nothing queued before it) right here
  // on the calling thread, which c10d calls with the GIL released.
  enum class Mode { kQueued, kQueuedPointToPoint, kInlineWhenIdle };
  static Mode CollectiveMode(bool async_op) { return async_op ? Mode::kQueued : Mode::kInlineWhenIdle; }
  // Queues `issue` as the next operation and returns its Work. `inputs` are what the profiler
  // records as the operation's shapes (a receive's buffer too, as Gloo records it); `outputs`
  // what the future completes with. `complete_extra` (optional) runs
  // after a successful issue, before the Work completes (point-to-point jobs copy staged
  // receives back there, after the group moved the data).
  // `device` is where the operation's tensors are (CallDevice): for a CUDA device the group's
  // stream there joins the caller's current stream first, the inputs', outputs' and `staged`
  // tensors' storages are recorded on it, `issue` and `complete_extra` run with it current, and
  // the Work completes when the braid calls have been queued (device_streams.h).
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type, const char* op, c10::Device device,
                                         std::vector<at::Tensor> inputs,
                                         std::vector<at::Tensor> outputs,
                                         std::function<Outcome()> issue, Mode mode,
                                         std::function<void()> complete_extra = nullptr,
                                         std::vector<at::Tensor> staged = {});
  // braid.h's stream argument for an operation on `device`: NULL for the CPU, the group's
  // stream for a CUDA device.
  braidStream_t StreamOf(c10::Device device);
  // "braid:all_reduce" style names (Gloo's op names, which the profiler tests match); stable
  // pointers for the profiler.
  const char* ProfilingTitle(const char* op);
  void CheckRoot(int root, const char* op) const;
  void CheckPeer(int peer, const char* op) const;
  // braidCommSplit over comm_ after every earlier operation of this rank, without the GIL (it
  // waits for the other ranks). color BRAID_SPLIT_NOCOLOR gives nullptr.
  braidComm_t SplitCommunicator(int color, int key, std::chrono::milliseconds timeout);

  const std::string name_;
  const c10::intrusive_ptr<c10d::Store> store_;
  // Guards the bookkeeping below against c10d calls from several threads at once (DDP's hooks
  // may run on autograd threads); never held while braid runs. Lock order: this, then the
  // JobQueue's own mutex.
  std::mutex issue_mutex_;
  std::chrono::milliseconds timeout_;
  braidComm_t comm_ = nullptr;
  std::unique_ptr<JobQueue> queue_;
  // op (a string literal, so its address names it) -> "<name>:<op>"
  std::unordered_map<const char*, std::string> titles_;
  uint64_t next_sequence_ = 0;
  uint64_t monitored_barriers_ = 0;  // every rank counts alike: the k-th one's store keys
  // Between startCoalescing and endCoalescing: the jobs and works of the batch.
  bool coalescing_ = false;
  std::vector<std::shared_ptr<Job>> coalesced_jobs_;
  std::vector<at::Tensor> coalesced_outputs_;
  std::optional<c10::Stream> coalesced_stream_;  // the batch's CUDA stream, if it has CUDA jobs
  // The group's own CUDA stream per device (thread-safe on its own).
  GroupStreams streams_;
};

}  // namespace braid_torch
