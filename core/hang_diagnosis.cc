#include "core/hang_diagnosis.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "core/base/logging.h"

namespace braid {
namespace {

constexpr int64_t kParkMs = 24LL * 3600 * 1000;  // a parked Get is re-armed once a day

std::string AskKey(int rank, int64_t k) {
  return "diag/ask/" + std::to_string(rank) + "/" + std::to_string(k);
}
std::string StateKey(int64_t k, int rank) {
  return "diag/state/" + std::to_string(k) + "/" + std::to_string(rank);
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

}  // namespace

ProgressBoard::Snapshot ProgressBoard::Read() const {
  for (;;) {
    const uint64_t before = version_.load(std::memory_order_acquire);
    if (before % 2 == 0) {
      Snapshot snapshot{sequence_.load(std::memory_order_relaxed),
                        op_.load(std::memory_order_relaxed),
                        bytes_.load(std::memory_order_relaxed),
                        active_.load(std::memory_order_relaxed)};
      // Keeps the field loads above from moving after the second version load.
      std::atomic_thread_fence(std::memory_order_acquire);
      if (version_.load(std::memory_order_relaxed) == before) return snapshot;
    }
    std::this_thread::yield();  // the writer is between its two version stores
  }
}

std::string ProgressBoard::Describe() const {
  const Snapshot now = Read();
  if (now.sequence < 0) return "idle; has entered no collective yet";
  std::string what = std::string(now.op) + " #" + std::to_string(now.sequence) + " (" +
                     std::to_string(now.bytes) + " bytes)";
  return now.active ? "in " + what : "idle; last entered " + what;
}

int64_t ProgressBoard::LastSequence() const { return sequence_.load(std::memory_order_acquire); }

Result<std::unique_ptr<HangDiagnosis>> HangDiagnosis::Start(
    std::shared_ptr<rendezvous::Store> own_store, std::shared_ptr<rendezvous::Store> store,
    int rank, int size, const ProgressBoard* board) {
  std::unique_ptr<HangDiagnosis> diagnosis(
      new HangDiagnosis(std::move(own_store), std::move(store), rank, size, board));
  diagnosis->thread_ = std::thread([d = diagnosis.get()] { d->Serve(); });
  return diagnosis;
}

HangDiagnosis::HangDiagnosis(std::shared_ptr<rendezvous::Store> own_store,
                             std::shared_ptr<rendezvous::Store> store, int rank, int size,
                             const ProgressBoard* board)
    : own_store_(std::move(own_store)),
      store_(std::move(store)),
      rank_(rank),
      size_(size),
      board_(board) {}

HangDiagnosis::~HangDiagnosis() {
  stopping_ = true;
  // Wake the parked Get by writing "stop" to the key it waits on. A diagnosis request may claim
  // that key first; the thread then answers it and parks on the next key, so repeat until it
  // has stopped. If the store is gone, the parked Get fails by itself.
  while (!stopped_.load()) {
    if (!store_->Set(AskKey(rank_, serving_.load()), "stop", Deadline::AfterMs(5000)).ok()) break;
    for (int i = 0; i < 200 && !stopped_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  thread_.join();
}

void HangDiagnosis::Serve() {
  int64_t k = 0;
  while (true) {
    serving_ = k;
    auto request = own_store_->Get(AskKey(rank_, k), Deadline::AfterMs(kParkMs));
    if (!request.ok()) {
      if (stopping_) break;
      // Why not give up on any other error: a live rank whose thread stopped answering would be
      // listed as "did not answer (gone or frozen?)" by every later diagnosis. A store call that
      // failed once (a reply late on a loaded machine closes the client's connection) is retried
      // on a fresh connection; a store that is really gone fails here until the destructor.
      if (request.status().code() != Code::kTimeout) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    if (request.value() == "stop") break;
    Status answered = own_store_->Set(StateKey(k, rank_), board_->Describe(), Deadline::AfterMs(5000));
    if (!answered.ok()) {
      if (stopping_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;  // asks again for request k, which is still there, and answers it
    }
    ++k;
  }
  stopped_ = true;
}

HangDiagnosis::Findings HangDiagnosis::Diagnose(uint64_t sequence, const char* op,
                                                int64_t wait_ms) {
  Findings findings;
  const Deadline deadline = Deadline::AfterMs(wait_ms);
  auto numbered = store_->Add("diag/requests", 1, deadline);
  if (!numbered.ok()) {
    findings.text = "could not ask the other ranks: " + numbered.status().message();
    return findings;
  }
  const int64_t k = numbered.value() - 1;
  // One MultiSet, so request k reaches every rank's mailbox or none: every answering thread
  // takes requests in order, and a mailbox left without request k would stall it for good.
  std::vector<std::string> asks, wheres(static_cast<size_t>(size_), "where");
  for (int r = 0; r < size_; ++r) asks.push_back(AskKey(r, k));
  Status asked = store_->MultiSet(asks, wheres, deadline);
  if (!asked.ok()) {
    findings.text = "could not ask the other ranks: " + asked.message();
    return findings;
  }
  // Why poll each answer rather than one Wait for them all: a frozen rank never answers, so a
  // Wait for every key holds this store connection for the whole budget and ends in a reply that
  // races the client's deadline (which then drops the connection, and with it the reads of the
  // answers that did come). Live ranks answer within milliseconds; polling reads each answer as
  // it comes and stops as soon as only silent ranks are left to wait for.
  std::vector<std::string> answers(static_cast<size_t>(size_));
  std::vector<bool> answered(static_cast<size_t>(size_), false);
  answered[static_cast<size_t>(rank_)] = true;
  int missing = size_ - 1;
  for (int round = 0; missing > 0; ++round) {
    for (int r = 0; r < size_; ++r) {
      if (answered[static_cast<size_t>(r)]) continue;
      const Deadline quick = Deadline::AfterMs(std::min<int64_t>(2000, std::max<int64_t>(
                                                   deadline.RemainingMs(), 200)));
      auto present = store_->Check({StateKey(k, r)}, quick);
      if (!present.ok() || !present.value()) continue;
      auto state = store_->Get(StateKey(k, r), quick);
      if (!state.ok()) continue;
      answers[static_cast<size_t>(r)] = state.value();
      answered[static_cast<size_t>(r)] = true;
      --missing;
    }
    if (missing == 0 || deadline.Expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 10 ? 5 : 50));
  }

  std::vector<std::string> behind, inside, silent;
  const std::string here = std::string(op) + " #" + std::to_string(sequence);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (!answered[static_cast<size_t>(r)]) {
      silent.push_back(std::to_string(r));
      findings.silent.push_back(r);
      continue;
    }
    const std::string& state = answers[static_cast<size_t>(r)];
    // States read "in <op> #<seq> (...)" or "idle; last entered <op> #<seq> (...)".
    size_t hash = state.find('#');
    long long seq = hash == std::string::npos ? -1 : std::atoll(state.c_str() + hash + 1);
    if (seq >= static_cast<long long>(sequence)) {
      inside.push_back(std::to_string(r));  // there, or there and already failed out of it
      findings.inside.push_back(r);
    } else {
      behind.push_back("rank " + std::to_string(r) + " (" + state + ")");
      findings.behind.emplace_back(r, state);
    }
  }
  std::string out;
  if (!behind.empty()) out += "ranks that had not reached " + here + ": " + Join(behind);
  if (!silent.empty()) {
    out += std::string(out.empty() ? "" : "; ") + "ranks that did not answer (process gone or frozen?): " + Join(silent);
  }
  if (!inside.empty()) out += std::string(out.empty() ? "" : "; ") + "ranks that reached " + here + ": " + Join(inside);
  if (out.empty()) out = "every other rank reports having reached " + here;
  BRAID_LOG(kWarn, rank_) << "hang diagnosis for " << here << ": " << out;
  findings.text = out;
  return findings;
}

}  // namespace braid
