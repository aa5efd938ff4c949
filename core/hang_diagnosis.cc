#include "core/hang_diagnosis.h"

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
      if (request.status().code() == Code::kTimeout && !stopping_) continue;
      break;  // store lost or closing: nothing left to answer through
    }
    if (request.value() == "stop") break;
    Status answered = own_store_->Set(StateKey(k, rank_), board_->Describe(), Deadline::AfterMs(5000));
    if (!answered.ok()) break;
    ++k;
  }
  stopped_ = true;
}

std::string HangDiagnosis::Diagnose(uint64_t sequence, const char* op, int64_t wait_ms) {
  const Deadline deadline = Deadline::AfterMs(wait_ms);
  auto numbered = store_->Add("diag/requests", 1, deadline);
  if (!numbered.ok()) return "could not ask the other ranks: " + numbered.status().message();
  const int64_t k = numbered.value() - 1;
  for (int r = 0; r < size_; ++r) {
    Status asked = store_->Set(AskKey(r, k), "where", deadline);
    if (!asked.ok()) return "could not ask the other ranks: " + asked.message();
  }
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(StateKey(k, r));
  (void)store_->Wait(keys, deadline);  // answers that came in time are read below either way

  std::vector<std::string> behind, inside, silent;
  const std::string here = std::string(op) + " #" + std::to_string(sequence);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto answer = store_->Check({keys[r]}, Deadline::AfterMs(2000));
    if (!answer.ok() || !answer.value()) {
      silent.push_back(std::to_string(r));
      continue;
    }
    auto state = store_->Get(keys[r], Deadline::AfterMs(2000));
    if (!state.ok()) {
      silent.push_back(std::to_string(r));
      continue;
    }
    // States read "in <op> #<seq> (...)" or "idle; last entered <op> #<seq> (...)".
    size_t hash = state.value().find('#');
    long long seq = hash == std::string::npos ? -1 : std::atoll(state.value().c_str() + hash + 1);
    if (seq >= static_cast<long long>(sequence)) {
      inside.push_back(std::to_string(r));  // there, or there and already failed out of it
    } else {
      behind.push_back("rank " + std::to_string(r) + " (" + state.value() + ")");
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
  return out;
}

}  // namespace braid
