// JobQueue: the worker thread of one braid process group. PyTorch's calls return a Work at once;
// the braid calls behind them run here, one after another, in issue order.
//
// Why one thread per process group: a braid communicator runs one operation at a time and every
// rank must issue the same operations in the same order, which is exactly what c10d promises per
// process group. Host-buffer braid calls block until complete, so they run off the Python
// thread (which never holds a braid lock and never waits unless it calls Work.wait()).
//
// Why point-to-point jobs are grouped: a blocking braidSend to a peer whose own worker is
// blocked in a braidSend to us would deadlock once the messages outgrow the transport's buffers.
// Consecutive point-to-point jobs (those queued together, and every job of a coalesced batch,
// i.e. batch_isend_irecv) run inside one braidGroupStart/braidGroupEnd, which posts every
// transfer before waiting for any, so an irecv is posted before its matching isend completes.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"

namespace braid_torch {

// What a job's braid calls came to: braidSuccess, or the first failure and its text.
struct Outcome {
  braidResult_t result = braidSuccess;
  std::string message;
  bool ok() const { return result == braidSuccess; }
};
// The outcome of one braid call made on this thread (its text from braidGetLastError).
Outcome Check(braidResult_t result);

struct Job {
  // Makes the braid calls of one operation (and copies data in and out around them) on the
  // worker thread. Inside a group (point_to_point jobs) braid only queues the transfers and
  // moves them at braidGroupEnd. An exception thrown here becomes braidInternalError.
  std::function<Outcome()> issue;
  // Completes the operation's Work with the outcome. Called exactly once, after issue (and for
  // grouped jobs after braidGroupEnd), on the worker thread; must not throw.
  std::function<void(const Outcome& outcome)> complete;
  bool point_to_point = false;
  // A coalesced batch (startCoalescing .. endCoalescing): these jobs run as one unit, consecutive
  // point-to-point ones in one group; `complete` then reports the batch's first failure.
  std::vector<std::shared_ptr<Job>> batch;
};

class JobQueue {
 public:
  JobQueue();
  // Runs what is queued, then stops the thread.
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Queues `job` behind everything queued before. Thread-safe; never blocks on braid.
  void Push(std::shared_ptr<Job> job);
  // Runs `job` on the calling thread if nothing is queued or running (then returns true once it
  // completed); otherwise returns false and the caller pushes it. Why: a synchronous call
  // (async_op=False) would otherwise pay two thread hand-offs, a wake-up of the worker and one
  // of the caller, which are most of a small collective's time. Order is kept: the worker takes
  // no job while an inline one runs.
  bool TryRunInline(const std::shared_ptr<Job>& job);
  // Blocks until every job queued so far has completed.
  void Drain();

 private:
  void Loop();
  // Runs `jobs` in order; consecutive point-to-point jobs share one braid group.
  static void RunInOrder(const std::vector<std::shared_ptr<Job>>& jobs,
                         std::vector<Outcome>* outcomes);

  // Lock order: mutex_ only; jobs run without it.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  size_t running_ = 0;  // jobs taken off queue_ (or run inline) and not yet completed
  size_t drain_waiters_ = 0;  // threads blocked in Drain()
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it reads
};

}  // namespace braid_torch
