// Hang diagnosis: when a collective times out, ask every rank through the store where it is.
//
// Why through the store and a thread: the rank that times out cannot see the others' state, and
// a rank stuck in user code (or in another collective) cannot answer from its main thread. Each
// communicator therefore runs one small thread, parked in a blocking store Get on its own mailbox
// key (no traffic while nothing is wrong), that answers "where are you" with this rank's progress:
// the last collective it entered and whether it is still inside it. A rank whose process is gone
// or frozen (SIGSTOP) does not answer, and is named as such.
//
// Keys (under the communicator's store prefix): "diag/requests" (counter), "diag/ask/<rank>/<k>"
// (the k-th request, or "stop"), "diag/state/<k>/<rank>" (the answer).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "rendezvous/store.h"

namespace braid {

// Where one rank is, updated on every operation; read by the diagnosis thread.
//
// Why a sequence lock rather than a mutex: Enter and Leave run twice per collective on the
// caller's thread, where a sub-microsecond call cannot spare two lock/unlock pairs, while the
// reader (the diagnosis thread) only reads when asked, after a timeout. The writer therefore
// only stores: it makes `version_` odd, writes the fields, and makes it even again; a reader
// retries until it saw the same even version before and after reading the fields, so it never
// reports a half-written state.
//
// Thread safety: one writer at a time (the communicator calls Enter/Leave under its operation
// lock); readers from any thread.
class ProgressBoard {
 public:
  // Inline: every collective call makes both.
  void Enter(uint64_t sequence, const char* op, size_t bytes) {
    BeginWrite();
    sequence_.store(static_cast<int64_t>(sequence), std::memory_order_relaxed);
    op_.store(op, std::memory_order_relaxed);
    bytes_.store(bytes, std::memory_order_relaxed);
    active_.store(true, std::memory_order_relaxed);
    EndWrite();
  }
  void Leave() {
    BeginWrite();
    active_.store(false, std::memory_order_relaxed);
    EndWrite();
  }
  // "in allreduce #12 (4096 bytes)" or "idle; last entered allreduce #11 (4096 bytes)".
  std::string Describe() const;
  // The sequence number of the last collective entered, or -1 if none.
  int64_t LastSequence() const;

 private:
  struct Snapshot {
    int64_t sequence;
    const char* op;
    size_t bytes;
    bool active;
  };
  // A consistent copy of the fields (see the class comment).
  Snapshot Read() const;
  void BeginWrite() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Keeps the field stores that follow from becoming visible before the odd version.
    std::atomic_thread_fence(std::memory_order_release);
  }
  void EndWrite() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  std::atomic<uint64_t> version_{0};  // odd while the writer is between BeginWrite and EndWrite
  std::atomic<int64_t> sequence_{-1};
  std::atomic<const char*> op_{""};
  std::atomic<size_t> bytes_{0};
  std::atomic<bool> active_{false};
};

class HangDiagnosis {
 public:
  // `own_store` must be a connection used by nothing else (it blocks in Get); `store` is the
  // communicator's, used to ask and to read answers. Both see the communicator's key prefix.
  static Result<std::unique_ptr<HangDiagnosis>> Start(std::shared_ptr<rendezvous::Store> own_store,
                                                      std::shared_ptr<rendezvous::Store> store,
                                                      int rank, int size,
                                                      const ProgressBoard* board);
  ~HangDiagnosis();

  // What Diagnose found: a sentence for the error message, and the ranks it names by kind (the
  // communicator turns `silent`, else `behind`, into the failure's root cause).
  struct Findings {
    std::string text;
    std::vector<int> silent;  // did not answer: frozen (SIGSTOP), gone, or its store lost
    std::vector<std::pair<int, std::string>> behind;  // had not reached it: rank, its state
    std::vector<int> inside;  // reached it (or went past it)
  };
  // Asks every rank where it is and waits up to `wait_ms` for answers, returning as soon as every
  // other rank answered. Findings name the ranks that had not reached collective `sequence`,
  // those that reached it, and those that did not answer.
  Findings Diagnose(uint64_t sequence, const char* op, int64_t wait_ms);

 private:
  HangDiagnosis(std::shared_ptr<rendezvous::Store> own_store,
                std::shared_ptr<rendezvous::Store> store, int rank, int size,
                const ProgressBoard* board);
  void Serve();

  std::shared_ptr<rendezvous::Store> own_store_;
  std::shared_ptr<rendezvous::Store> store_;
  const int rank_;
  const int size_;
  const ProgressBoard* board_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> serving_{0};  // the request number the thread is waiting for
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace braid
