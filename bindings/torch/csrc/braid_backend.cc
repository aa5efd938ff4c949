#include "braid_backend.h"

#include <Python.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

namespace braid_torch {
namespace {

// Raises a DistBackendError for a braid call made on the calling thread (set-up, teardown).
void ThrowIfFailed(braidResult_t result, const std::string& op) {
  if (result != braidSuccess) std::rethrow_exception(MakeBraidError(op, result, braidGetLastError(nullptr)));
}

std::string KeyOf(const char* prefix, uint64_t n) { return std::string(prefix) + std::to_string(n); }

// Every rank of this incarnation of the group adds 1 once; the k-th incarnation (a group that
// was destroyed and made again over the same store, as FileStore allows) reads
// (count - 1) / size = k, so stale ids from an earlier incarnation are never read.
std::string UniqueIdKey(c10d::Store& store, int size) {
  int64_t count = store.add("braid/init_count", 1);
  return KeyOf("braid/unique_id/", static_cast<uint64_t>((count - 1) / size));
}

int64_t RowBytes(const at::Tensor& t) {
  return t.dim() == 0 || t.size(0) == 0 ? 0 : static_cast<int64_t>(Bytes(t) / t.size(0));
}

// Byte offsets of rows split as `splits` (empty: equal parts for `size` ranks).
std::vector<int64_t> SplitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                const char* what) {
  std::vector<int64_t> bytes(size);
  if (splits.empty()) {
    TORCH_CHECK(t.dim() > 0 ? t.size(0) % size == 0 : size == 1, "braid alltoall: ", what,
                " has ", t.dim() > 0 ? t.size(0) : 1, " rows, not a multiple of ", size, " ranks");
    int64_t each = static_cast<int64_t>(Bytes(t)) / size;
    for (auto& b : bytes) b = each;
    return bytes;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "braid alltoall: ", what, " split sizes have ",
              splits.size(), " entries for ", size, " ranks");
  int64_t rows = 0;
  for (int r = 0; r < size; ++r) {
    TORCH_CHECK(splits[r] >= 0, "braid alltoall: ", what, " split size ", splits[r], " is negative");
    rows += splits[r];
    bytes[r] = splits[r] * RowBytes(t);
  }
  TORCH_CHECK(t.dim() > 0 && rows == t.size(0), "braid alltoall: ", what, " split sizes add up to ",
              rows, " rows but the tensor has ", t.dim() > 0 ? t.size(0) : 0);
  return bytes;
}

}  // namespace

BraidBackend::BraidBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                           std::chrono::milliseconds timeout, std::string name)
    : Backend(rank, size), name_(std::move(name)), store_(std::move(store)), timeout_(timeout) {
  const std::string key = UniqueIdKey(*store_, size);
  braidUniqueId id;
  if (rank == 0) {
    ThrowIfFailed(braidGetUniqueId(&id), "init (braidGetUniqueId)");
    store_->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store_->get(key);  // waits up to the store's timeout
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "braid: rank ", rank, ": the unique id in the store has ",
                bytes.size(), " bytes, not ", sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::min<int64_t>(timeout.count(), INT32_MAX));
  ThrowIfFailed(braidCommInitRankConfig(&comm_, size, id, rank, &config),
                "init of rank " + std::to_string(rank) + " of " + std::to_string(size));
  queue_ = std::make_unique<JobQueue>();
}

BraidBackend::BraidBackend(braidComm_t comm, c10::intrusive_ptr<c10d::Store> store, int rank,
                           int size, std::chrono::milliseconds timeout, std::string name)
    : Backend(rank, size),
      name_(std::move(name)),
      store_(std::move(store)),
      timeout_(timeout),
      comm_(comm),
      queue_(std::make_unique<JobQueue>()) {}

BraidBackend::~BraidBackend() { shutdown(); }

c10::intrusive_ptr<c10d::Backend::Options> BraidBackend::getBackendOptions() {
  return c10::make_intrusive<Options>(name_, timeout_);
}

namespace {

// The color braidCommSplit groups a subgroup's members by: the same for every member (they pass
// the same rank list), different for different lists but for a hash collision, which the size
// check after the split catches.
int SplitColor(const std::vector<int64_t>& ranks) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the ranks
  for (int64_t r : ranks) {
    hash ^= static_cast<uint64_t>(r);
    hash *= 1099511628211ull;
  }
  return static_cast<int>(hash & 0x3fffffff);  // non-negative: BRAID_SPLIT_NOCOLOR is -1
}

}  // namespace

braidComm_t BraidBackend::SplitCommunicator(int color, int key, std::chrono::milliseconds timeout) {
  // The split waits for every rank of this group. Holding the GIL meanwhile would block this
  // process's completion callbacks (comm hooks run Python) that the drain below may wait for.
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  TORCH_CHECK(comm_ != nullptr, "braid split: the process group was shut down");
  queue_->Drain();  // braidCommSplit is ordered after this rank's earlier operations
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::min<int64_t>(timeout.count(), INT32_MAX));
  braidComm_t child = nullptr;
  ThrowIfFailed(braidCommSplit(comm_, color, key, &child, &config),
                "split of rank " + std::to_string(rank_) + " (braidCommSplit)");
  return child;
}

c10::intrusive_ptr<c10d::Backend> BraidBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::vector<int>& ranks,
                                                      const c10::intrusive_ptr<Options>& opts) {
  auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < size_, "braid split: rank ", r, " is outside the group of ", size_,
                " ranks");
  }
  const std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_;
  if (mine == ranks.end()) {
    SplitNonMember();
    return nullptr;
  }
  return SplitMember(store, std::vector<int64_t>(ranks.begin(), ranks.end()),
                     static_cast<int>(mine - ranks.begin()), timeout);
}

c10::intrusive_ptr<BraidBackend> BraidBackend::SplitMember(const c10::intrusive_ptr<c10d::Store>& store,
                                                           const std::vector<int64_t>& ranks,
                                                           int rank, std::chrono::milliseconds timeout) {
  TORCH_CHECK(rank >= 0 && rank < static_cast<int>(ranks.size()) && ranks[rank] == rank_,
              "braid split: rank ", rank_, " is not at position ", rank, " of the subgroup's ranks");
  braidComm_t child = SplitCommunicator(SplitColor(ranks), rank, timeout);
  int child_size = 0;
  braidCommCount(child, &child_size);
  if (child_size != static_cast<int>(ranks.size())) {
    braidCommDestroy(child);
    TORCH_CHECK(false, "braid split: rank ", rank_, " got a subgroup of ", child_size,
                " ranks for a list of ", ranks.size(),
                " (ranks disagree on the subgroups, or two lists hashed to one color)");
  }
  return c10::make_intrusive<BraidBackend>(child, store, rank, child_size, timeout, name_);
}

void BraidBackend::SplitNonMember() {
  SplitCommunicator(BRAID_SPLIT_NOCOLOR, 0, timeout_);
}

void BraidBackend::shutdown() {
  if (comm_ == nullptr) return;
  queue_.reset();  // runs what is queued, then joins the worker
  braidCommDestroy(comm_);
  comm_ = nullptr;
}

void BraidBackend::abort() {
  if (comm_ != nullptr) braidCommAbort(comm_);
}

const char* BraidBackend::ProfilingTitle(const char* op) {
  auto [it, inserted] = titles_.try_emplace(op);
  if (inserted) it->second = name_ + ":" + op;
  return it->second.c_str();
}

void BraidBackend::CheckRoot(int root, const char* op) const {
  TORCH_CHECK(root >= 0 && root < size_, "braid ", op, ": root rank ", root,
              " is outside the group of ", size_, " ranks");
}

void BraidBackend::CheckPeer(int peer, const char* op) const {
  TORCH_CHECK(peer >= 0 && peer < size_, "braid ", op, ": peer rank ", peer,
              " is outside the group of ", size_, " ranks");
}

braidStream_t BraidBackend::StreamOf(c10::Device device) {
  if (!device.is_cuda()) return nullptr;  // host buffers: braid.h's NULL stream
  return BraidStream(streams_.For(device));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::Enqueue(c10d::OpType type, const char* op,
                                                     c10::Device device,
                                                     std::vector<at::Tensor> inputs,
                                                     std::vector<at::Tensor> outputs,
                                                     std::function<Outcome()> issue, Mode mode,
                                                     std::function<void()> complete_extra,
                                                     std::vector<at::Tensor> staged) {
  std::optional<c10::Stream> stream;
  if (device.is_cuda()) {
    // The group's stream joins the caller's current stream now, on the calling thread, so the
    // operation is ordered after what the caller queued before it, whenever the worker runs it.
    std::vector<at::Tensor> used = inputs;
    used.insert(used.end(), outputs.begin(), outputs.end());
    used.insert(used.end(), staged.begin(), staged.end());
    stream = streams_.Join(device, used);
    // The job's staging copies and its copies back go on the group's stream too.
    issue = [issue = std::move(issue), s = *stream]() {
      c10::StreamGuard guard(s);
      return issue();
    };
    if (complete_extra) {
      complete_extra = [extra = std::move(complete_extra), s = *stream]() {
        c10::StreamGuard guard(s);
        extra();
      };
    }
  }
  std::unique_lock<std::mutex> lock(issue_mutex_);
  TORCH_CHECK(comm_ != nullptr, "braid ", op, ": the process group was shut down");
  auto work = c10::make_intrusive<BraidWork>(rank_, type, ProfilingTitle(op), std::move(inputs),
                                             outputs, comm_, next_sequence_++, stream);
  auto job = std::make_shared<Job>();
  job->issue = std::move(issue);
  job->point_to_point = mode == Mode::kQueuedPointToPoint;
  const char* op_name = op;  // a string literal
  job->complete = [work, op_name, extra = std::move(complete_extra)](const Outcome& outcome) {
    if (!outcome.ok()) {
      work->MarkDone(MakeBraidError(op_name, outcome.result, outcome.message));
      return;
    }
    try {
      if (extra) extra();
      if (work->on_cuda()) {
        work->MarkQueued();
      } else {
        work->MarkDone(nullptr);
      }
    } catch (const std::exception& e) {
      work->MarkDone(MakeBraidError(op_name, braidInternalError, e.what()));
    }
  };
  if (coalescing_) {
    if (stream && !coalesced_stream_) coalesced_stream_ = stream;
    coalesced_jobs_.push_back(std::move(job));
    coalesced_outputs_.insert(coalesced_outputs_.end(), outputs.begin(), outputs.end());
    return work;
  }
  if (mode != Mode::kInlineWhenIdle) {
    queue_->Push(std::move(job));
    return work;
  }
  lock.unlock();  // the inline run blocks in braid: other threads may queue meanwhile
  if (!queue_->TryRunInline(job)) queue_->Push(std::move(job));
  return work;
}

void BraidBackend::startCoalescing() {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  TORCH_CHECK(!coalescing_, "braid: startCoalescing called twice without endCoalescing");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::endCoalescing() {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  TORCH_CHECK(coalescing_, "braid: endCoalescing without startCoalescing");
  coalescing_ = false;
  auto work = c10::make_intrusive<BraidWork>(rank_, c10d::OpType::COALESCED, ProfilingTitle("coalesced"),
                                             std::vector<at::Tensor>(), std::move(coalesced_outputs_),
                                             comm_, next_sequence_++, coalesced_stream_);
  coalesced_outputs_.clear();
  coalesced_stream_.reset();
  auto batch = std::make_shared<Job>();
  batch->batch = std::move(coalesced_jobs_);
  coalesced_jobs_.clear();
  // A batch with CUDA operations completes as they do: once queued on the group's stream (the
  // batch's jobs all ran on it before this), and its wait() is a stream wait.
  batch->complete = [work](const Outcome& outcome) {
    if (!outcome.ok()) {
      work->MarkDone(MakeBraidError("coalesced batch", outcome.result, outcome.message));
    } else if (work->on_cuda()) {
      work->MarkQueued();
    } else {
      work->MarkDone(nullptr);
    }
  };
  if (batch->batch.empty()) {
    work->MarkDone(nullptr);
    return work;
  }
  queue_->Push(std::move(batch));
  return work;
}

// --- Reductions -------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BraidBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "braid allreduce: takes one tensor per rank, got ", tensors.size());
  at::Tensor tensor = tensors[0];
  CheckDense(tensor, "allreduce tensor");
  Reduction reduction = ResolveReduction(tensor.scalar_type(), opts.reduceOp, "allreduce");
  const c10::Device device = CallDevice("allreduce").Add(tensor, "tensor").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::ALLREDUCE, "all_reduce", device, tensors, tensors, [=]() mutable {
    at::Tensor buffer = Contiguous(tensor);
    reduction.Premultiply(buffer);
    Outcome outcome = Check(braidAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                           reduction.type, reduction.op, comm, stream));
    if (outcome.ok()) CopyBack(buffer, tensor);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  CheckDense(tensors, "allreduce_coalesced tensors");
  TORCH_CHECK(!tensors.empty(), "braid allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "braid allreduce_coalesced: tensors mix ",
                tensors[0].scalar_type(), " and ", t.scalar_type());
  }
  Reduction reduction = ResolveReduction(tensors[0].scalar_type(), opts.reduceOp, "allreduce_coalesced");
  const c10::Device device = CallDevice("allreduce_coalesced").Add(tensors, "tensors").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::ALLREDUCE_COALESCED, "all_reduce", device, tensors, tensors,
                 [=]() mutable {
    at::Tensor flat = FlattenBytes(tensors).view(tensors[0].scalar_type());
    reduction.Premultiply(flat);
    Outcome outcome = Check(braidAllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(),
                                           reduction.type, reduction.op, comm, stream));
    if (outcome.ok()) UnflattenBytes(flat.view(at::kByte), 0, tensors);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "braid reduce: takes one tensor per rank, got ", tensors.size());
  at::Tensor tensor = tensors[0];
  CheckDense(tensor, "reduce tensor");
  CheckRoot(opts.rootRank, "reduce");
  Reduction reduction = ResolveReduction(tensor.scalar_type(), opts.reduceOp, "reduce");
  const int root = opts.rootRank;
  const bool is_root = rank_ == root;
  const c10::Device device = CallDevice("reduce").Add(tensor, "tensor").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::REDUCE, "reduce", device, tensors, tensors, [=]() mutable {
    at::Tensor buffer = Contiguous(tensor);
    // Only the root's tensor receives the result; a premultiplied input is a copy, so the other
    // ranks' tensors stay as they were.
    at::Tensor send = buffer;
    if (reduction.premultiplies()) {
      send = buffer.clone();
      reduction.Premultiply(send);
    }
    Outcome outcome = Check(braidReduce(send.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                        reduction.type, reduction.op, root, comm, stream));
    if (outcome.ok() && is_root) CopyBack(buffer, tensor);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "braid reduce_scatter: takes one output and one input list per rank");
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "braid reduce_scatter: the input list has ",
              inputs[0].size(), " tensors for ", size_, " ranks");
  at::Tensor output = outputs[0];
  CheckDense(output, "reduce_scatter output");
  CheckDense(inputs[0], "reduce_scatter input");
  for (const at::Tensor& t : inputs[0]) {
    TORCH_CHECK(t.numel() == output.numel() && t.scalar_type() == output.scalar_type(),
                "braid reduce_scatter: every input must match the output (", output.numel(), " x ",
                output.scalar_type(), "), got ", t.numel(), " x ", t.scalar_type());
  }
  Reduction reduction = ResolveReduction(output.scalar_type(), opts.reduceOp, "reduce_scatter");
  std::vector<at::Tensor> pieces = inputs[0];
  const c10::Device device = CallDevice("reduce_scatter").Add(output, "output").Add(inputs[0], "input").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", device, pieces, outputs, [=]() mutable {
    at::Tensor flat = FlattenBytes(pieces).view(output.scalar_type());
    reduction.Premultiply(flat);
    at::Tensor buffer = Contiguous(output);
    Outcome outcome = Check(braidReduceScatter(flat.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                               reduction.type, reduction.op, comm, stream));
    if (outcome.ok()) CopyBack(buffer, output);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> BraidBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "braid reduce_scatter_tensor: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  CheckDense(outputs, "reduce_scatter_tensor output");
  CheckDense(inputs, "reduce_scatter_tensor input");
  std::vector<Reduction> reductions;
  for (size_t i = 0; i < outputs.size(); ++i) {
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_ &&
                    inputs[i].scalar_type() == outputs[i].scalar_type(),
                "braid reduce_scatter_tensor: the input must hold ", size_, " x the output's ",
                outputs[i].numel(), " elements of ", outputs[i].scalar_type(), ", got ",
                inputs[i].numel(), " of ", inputs[i].scalar_type());
    reductions.push_back(ResolveReduction(outputs[i].scalar_type(), opts.reduceOp, "reduce_scatter_tensor"));
  }
  const c10::Device device = CallDevice("reduce_scatter_tensor").Add(outputs, "output").Add(inputs, "input").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", device, inputs, outputs,
                 [=]() mutable {
    for (size_t i = 0; i < outputs.size(); ++i) {
      at::Tensor send = Contiguous(inputs[i]);
      if (reductions[i].premultiplies()) {
        send = send.clone();
        reductions[i].Premultiply(send);
      }
      at::Tensor buffer = Contiguous(outputs[i]);
      Outcome outcome = Check(braidReduceScatter(send.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                                 reductions[i].type, reductions[i].op, comm, stream));
      if (!outcome.ok()) return outcome;
      CopyBack(buffer, outputs[i]);
    }
    return Outcome();
  }, CollectiveMode(opts.asyncOp));
}

// --- Data movement (raw bytes: every dtype) ---------------------------------------------------

c10::intrusive_ptr<c10d::Work> BraidBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1 && opts.rootTensor == 0,
              "braid broadcast: takes one tensor per rank, got ", tensors.size());
  at::Tensor tensor = tensors[0];
  CheckDense(tensor, "broadcast tensor");
  CheckRoot(opts.rootRank, "broadcast");
  const int root = opts.rootRank;
  const c10::Device device = CallDevice("broadcast").Add(tensor, "tensor").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::BROADCAST, "broadcast", device, tensors, tensors, [=]() mutable {
    at::Tensor buffer = Contiguous(tensor);
    Outcome outcome = Check(braidBroadcast(buffer.data_ptr(), buffer.data_ptr(), Bytes(buffer),
                                           braidUint8, root, comm, stream));
    if (outcome.ok()) CopyBack(buffer, tensor);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "braid allgather: takes one input and one output list per rank");
  // One input gathered into one tensor per rank: the coalesced form with lists of one.
  std::vector<std::vector<at::Tensor>> by_rank;
  for (const at::Tensor& t : outputs[0]) by_rank.push_back({t});
  return allgather_coalesced(by_rank, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(static_cast<int>(output_lists.size()) == size_, "braid allgather: ", output_lists.size(),
              " output lists for ", size_, " ranks");
  CheckDense(inputs, "allgather input");
  int64_t input_bytes = 0;
  for (const at::Tensor& t : inputs) input_bytes += static_cast<int64_t>(Bytes(t));
  std::vector<at::Tensor> flat_outputs;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(output_lists[r].size() == inputs.size(), "braid allgather: output list ", r, " has ",
                output_lists[r].size(), " tensors for ", inputs.size(), " inputs");
    CheckDense(output_lists[r], "allgather output");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& out = output_lists[r][i];
      TORCH_CHECK(out.numel() == inputs[i].numel() && out.scalar_type() == inputs[i].scalar_type(),
                  "braid allgather: output ", r, "/", i, " (", out.numel(), " x ", out.scalar_type(),
                  ") does not match input ", i, " (", inputs[i].numel(), " x ", inputs[i].scalar_type(), ")");
      flat_outputs.push_back(out);
    }
  }
  const c10::Device device = CallDevice("allgather").Add(inputs, "input").Add(flat_outputs, "output").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  const int size = size_;
  return Enqueue(c10d::OpType::ALLGATHER, "all_gather", device, inputs, flat_outputs, [=]() mutable {
    at::Tensor send = FlattenBytes(inputs);
    at::Tensor gathered = at::empty({input_bytes * size}, send.options().dtype(at::kByte));
    Outcome outcome = Check(braidAllGather(send.data_ptr(), gathered.data_ptr(), input_bytes,
                                           braidUint8, comm, stream));
    if (outcome.ok()) UnflattenBytes(gathered, 0, flat_outputs);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "braid allgather_into_tensor: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  CheckDense(outputs, "allgather_into_tensor output");
  CheckDense(inputs, "allgather_into_tensor input");
  for (size_t i = 0; i < outputs.size(); ++i) {
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_ &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                "braid allgather_into_tensor: the output must hold ", size_, " x the input's ",
                inputs[i].numel(), " elements of ", inputs[i].scalar_type(), ", got ",
                outputs[i].numel(), " of ", outputs[i].scalar_type());
  }
  const c10::Device device = CallDevice("allgather_into_tensor").Add(outputs, "output").Add(inputs, "input").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", device, inputs, outputs, [=]() mutable {
    for (size_t i = 0; i < outputs.size(); ++i) {
      at::Tensor send = Contiguous(inputs[i]);
      at::Tensor buffer = Contiguous(outputs[i]);
      Outcome outcome = Check(braidAllGather(send.data_ptr(), buffer.data_ptr(), Bytes(send),
                                             braidUint8, comm, stream));
      if (!outcome.ok()) return outcome;
      CopyBack(buffer, outputs[i]);
    }
    return Outcome();
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::GatherOptions& opts) {
  CheckRoot(opts.rootRank, "gather");
  TORCH_CHECK(inputs.size() == 1, "braid gather: takes one input tensor per rank, got ", inputs.size());
  at::Tensor input = inputs[0];
  CheckDense(input, "gather input");
  const int root = opts.rootRank;
  std::vector<at::Tensor> targets;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "braid gather: the root needs one output list of ", size_, " tensors");
    CheckDense(outputs[0], "gather output");
    for (const at::Tensor& t : outputs[0]) {
      TORCH_CHECK(t.numel() == input.numel() && t.scalar_type() == input.scalar_type(),
                  "braid gather: every output must match the input (", input.numel(), " x ",
                  input.scalar_type(), "), got ", t.numel(), " x ", t.scalar_type());
    }
    targets = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "braid gather: only the root (rank ", root,
                ") passes output tensors");
  }
  const c10::Device device = CallDevice("gather").Add(input, "input").Add(targets, "output").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  const int size = size_;
  return Enqueue(c10d::OpType::GATHER, "gather", device, inputs, targets, [=]() mutable {
    at::Tensor send = Contiguous(input);
    const int64_t bytes = static_cast<int64_t>(Bytes(send));
    at::Tensor gathered = at::empty({targets.empty() ? 0 : bytes * size}, send.options().dtype(at::kByte));
    Outcome outcome = Check(braidGather(send.data_ptr(), targets.empty() ? nullptr : gathered.data_ptr(),
                                        bytes, braidUint8, root, comm, stream));
    if (outcome.ok() && !targets.empty()) UnflattenBytes(gathered, 0, targets);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  CheckRoot(opts.rootRank, "scatter");
  TORCH_CHECK(outputs.size() == 1, "braid scatter: takes one output tensor per rank, got ", outputs.size());
  at::Tensor output = outputs[0];
  CheckDense(output, "scatter output");
  const int root = opts.rootRank;
  std::vector<at::Tensor> sources;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "braid scatter: the root needs one input list of ", size_, " tensors");
    CheckDense(inputs[0], "scatter input");
    for (const at::Tensor& t : inputs[0]) {
      TORCH_CHECK(t.numel() == output.numel() && t.scalar_type() == output.scalar_type(),
                  "braid scatter: every input must match the output (", output.numel(), " x ",
                  output.scalar_type(), "), got ", t.numel(), " x ", t.scalar_type());
    }
    sources = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "braid scatter: only the root (rank ", root,
                ") passes input tensors");
  }
  const c10::Device device = CallDevice("scatter").Add(output, "output").Add(sources, "input").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::SCATTER, "scatter", device, sources, outputs, [=]() mutable {
    at::Tensor flat = sources.empty() ? at::Tensor() : FlattenBytes(sources);
    at::Tensor buffer = Contiguous(output);
    Outcome outcome = Check(braidScatter(flat.defined() ? flat.data_ptr() : nullptr, buffer.data_ptr(),
                                         Bytes(buffer), braidUint8, root, comm, stream));
    if (outcome.ok()) CopyBack(buffer, output);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& output_split_sizes,
                                                           std::vector<int64_t>& input_split_sizes,
                                                           const c10d::AllToAllOptions& opts) {
  CheckDense(output, "alltoall output");
  CheckDense(input, "alltoall input");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "braid alltoall: output is ",
              output.scalar_type(), " but input is ", input.scalar_type());
  std::vector<int64_t> send_bytes = SplitBytes(input, input_split_sizes, size_, "input");
  std::vector<int64_t> recv_bytes = SplitBytes(output, output_split_sizes, size_, "output");
  const bool equal = output_split_sizes.empty() && input_split_sizes.empty();
  std::vector<at::Tensor> inputs{input}, outputs{output};
  const c10::Device device = CallDevice("alltoall").Add(output, "output").Add(input, "input").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  const int rank = rank_, size = size_;
  return Enqueue(c10d::OpType::ALLTOALL_BASE, "all_to_all", device, inputs, outputs, [=]() mutable {
    at::Tensor send = Contiguous(input);
    at::Tensor buffer = Contiguous(output);
    Outcome outcome;
    if (equal) {
      outcome = Check(braidAllToAll(send.data_ptr(), buffer.data_ptr(), send_bytes[0], braidUint8, comm, stream));
    } else {
      // Uneven splits: one braid group of a send and a receive per peer (own piece copied).
      auto* from = static_cast<const char*>(send.data_ptr());
      auto* to = static_cast<char*>(buffer.data_ptr());
      outcome = Check(braidGroupStart());
      if (!outcome.ok()) return outcome;
      int64_t send_at = 0, recv_at = 0;
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) {
          CopyBytes(buffer, recv_at, send, send_at, send_bytes[peer]);
        } else {
          if (outcome.ok()) outcome = Check(braidSend(from + send_at, send_bytes[peer], braidUint8, peer, comm, stream));
          if (outcome.ok()) outcome = Check(braidRecv(to + recv_at, recv_bytes[peer], braidUint8, peer, comm, stream));
        }
        send_at += send_bytes[peer];
        recv_at += recv_bytes[peer];
      }
      Outcome ended = Check(braidGroupEnd());
      if (outcome.ok()) outcome = ended;
    }
    if (outcome.ok()) CopyBack(buffer, output);
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

c10::intrusive_ptr<c10d::Work> BraidBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "braid alltoall: needs ", size_, " inputs and outputs, got ", inputs.size(), " and ",
              outputs.size());
  CheckDense(outputs, "alltoall output");
  CheckDense(inputs, "alltoall input");
  const c10::Device device = CallDevice("alltoall").Add(outputs, "output").Add(inputs, "input").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  const int rank = rank_, size = size_;
  return Enqueue(c10d::OpType::ALLTOALL, "all_to_all", device, inputs, outputs, [=]() mutable {
    std::vector<at::Tensor> sends, buffers;
    for (int peer = 0; peer < size; ++peer) {
      sends.push_back(Contiguous(inputs[peer]));
      buffers.push_back(Contiguous(outputs[peer]));
    }
    Outcome outcome = Check(braidGroupStart());
    if (!outcome.ok()) return outcome;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) {
        TORCH_CHECK(Bytes(buffers[peer]) == Bytes(sends[peer]), "braid alltoall: own piece sizes differ");
        CopyBytes(buffers[peer], 0, sends[peer], 0, static_cast<int64_t>(Bytes(sends[peer])));
        continue;
      }
      if (outcome.ok()) outcome = Check(braidSend(sends[peer].data_ptr(), Bytes(sends[peer]), braidUint8, peer, comm, stream));
      if (outcome.ok()) outcome = Check(braidRecv(buffers[peer].data_ptr(), Bytes(buffers[peer]), braidUint8, peer, comm, stream));
    }
    Outcome ended = Check(braidGroupEnd());
    if (outcome.ok()) outcome = ended;
    if (outcome.ok()) {
      for (int peer = 0; peer < size; ++peer) CopyBack(buffers[peer], outputs[peer]);
    }
    return outcome;
  }, CollectiveMode(opts.asyncOp));
}

// --- Point to point ---------------------------------------------------------------------------
// Tags are not matched: as with NCCL, sends and receives between two ranks pair up in order.

c10::intrusive_ptr<c10d::Work> BraidBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                  int /*tag*/) {
  TORCH_CHECK(tensors.size() == 1, "braid send: takes one tensor, got ", tensors.size());
  CheckPeer(dst_rank, "send");
  at::Tensor tensor = tensors[0];
  CheckDense(tensor, "send tensor");
  // A non-contiguous tensor is copied now, on the caller's thread; a contiguous one is sent from
  // its own memory, so (as with every backend) it must not change before the Work completes.
  at::Tensor staged = Contiguous(tensor);
  const c10::Device device = CallDevice("send").Add(tensor, "tensor").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::SEND, "send", device, tensors, {}, [=]() {
    return Check(braidSend(staged.data_ptr(), Bytes(staged), braidUint8, dst_rank, comm, stream));
  }, Mode::kQueuedPointToPoint, nullptr, {staged});
}

c10::intrusive_ptr<c10d::Work> BraidBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                  int /*tag*/) {
  TORCH_CHECK(tensors.size() == 1, "braid recv: takes one tensor, got ", tensors.size());
  CheckPeer(src_rank, "recv");
  at::Tensor tensor = tensors[0];
  CheckDense(tensor, "recv tensor");
  at::Tensor staged = Contiguous(tensor);
  const c10::Device device = CallDevice("recv").Add(tensor, "tensor").device();
  const braidStream_t stream = StreamOf(device);
  braidComm_t comm = comm_;
  auto work = Enqueue(c10d::OpType::RECV, "recv", device, tensors, tensors, [=]() {
    return Check(braidRecv(staged.data_ptr(), Bytes(staged), braidUint8, src_rank, comm, stream));
  }, Mode::kQueuedPointToPoint, [staged, tensor]() mutable { CopyBack(staged, tensor); }, {staged});
  static_cast<BraidWork*>(work.get())->SetSourceRank(src_rank);
  return work;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                           int /*tag*/) {
  TORCH_CHECK(tensors.size() == 1, "braid recv: takes one tensor, got ", tensors.size());
  at::Tensor tensor = tensors[0];
  CheckDense(tensor, "recv tensor");
  TORCH_CHECK(tensor.device().is_cpu(), "braid recv from any source: the tensor is on ",
              tensor.device().str(), ", but a receive from any source moves host memory only "
              "(braidRecvAny); name the sender (recv(src=...)) or receive into a CPU tensor");
  at::Tensor staged = Contiguous(tensor);
  braidComm_t comm = comm_;
  auto source = std::make_shared<std::atomic<int>>(-1);
  // Not grouped with neighbouring point-to-point jobs: braid matches a receive from any source
  // on its own (the first message to arrive decides the sender), never inside a group.
  auto work = Enqueue(c10d::OpType::RECVANYSOURCE, "recvAnySource", c10::Device(c10::kCPU), tensors, tensors, [=]() {
    int peer = -1;
    Outcome outcome = Check(braidRecvAny(staged.data_ptr(), Bytes(staged), braidUint8, &peer, comm, nullptr));
    if (outcome.ok()) source->store(peer);
    return outcome;
  }, Mode::kQueued, [staged, tensor]() mutable { CopyBack(staged, tensor); });
  static_cast<BraidWork*>(work.get())->ShareSourceRank(source);
  return work;
}

// --- Barriers ---------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BraidBackend::barrier(const c10d::BarrierOptions& opts) {
  braidComm_t comm = comm_;
  return Enqueue(c10d::OpType::BARRIER, "barrier", c10::Device(c10::kCPU), {}, {}, [=]() {
    return Check(braidBarrier(comm, nullptr));
  }, CollectiveMode(opts.asyncOp));
}

void BraidBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  TORCH_CHECK(comm_ != nullptr, "braid monitored_barrier: the process group was shut down");
  using Clock = std::chrono::steady_clock;
  const std::chrono::milliseconds timeout =
      opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const std::string prefix = "braid/monitored_barrier/" + std::to_string(monitored_barriers_++) + "/";
  queue_->Drain();  // this rank arrives once its earlier operations are done
  const std::string ms = std::to_string(timeout.count()) + " ms";
  if (rank_ != 0) {
    store_->set(prefix + "arrived/" + std::to_string(rank_), std::vector<uint8_t>{1});
    std::vector<uint8_t> verdict;
    try {
      store_->wait({prefix + "verdict"}, timeout + std::chrono::seconds(5));
      verdict = store_->get(prefix + "verdict");
    } catch (const std::exception& e) {
      C10_THROW_ERROR(DistBackendError,
                      "Rank " + std::to_string(rank_) + " successfully reached monitoredBarrier, but "
                      "received errors while waiting for send/recv from rank 0 (no verdict from rank 0 "
                      "within " + ms + " + 5 s): " + e.what());
    }
    if (!verdict.empty() && verdict[0] != 'o') {
      C10_THROW_ERROR(DistBackendError,
                      "Rank " + std::to_string(rank_) + " successfully reached monitoredBarrier, but "
                      "received errors while waiting for send/recv from rank 0: " +
                      std::string(verdict.begin(), verdict.end()));
    }
    return;
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<int> missing;
  std::string failure;
  if (timeout.count() <= 0 && size_ > 1) {
    failure = "Rank 0 timed out in monitoredBarrier after " + ms;
  }
  for (int r = 1; r < size_ && failure.empty(); ++r) {
    const std::string key = prefix + "arrived/" + std::to_string(r);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    bool arrived = false;
    if (left.count() > 0) {
      try {
        store_->wait({key}, left);
        arrived = true;
      } catch (const std::exception&) {
        arrived = store_->check({key});
      }
    } else {
      arrived = store_->check({key});
    }
    if (arrived) continue;
    missing.push_back(r);
    if (!wait_all_ranks) {
      failure = "Rank " + std::to_string(r) + " failed to pass monitoredBarrier in " + ms;
    }
  }
  if (failure.empty() && !missing.empty()) {
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    failure = "Ranks " + list + " failed to pass monitoredBarrier in " + ms;
  }
  const std::string verdict = failure.empty() ? "ok" : failure;
  store_->set(prefix + "verdict", std::vector<uint8_t>(verdict.begin(), verdict.end()));
  if (!failure.empty()) C10_THROW_ERROR(DistBackendError, failure);
}

}  // namespace braid_torch
