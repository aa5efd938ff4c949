// Futex sleeping for the shm transport's waits (the spin / yield / sleep strategy and its phase
// lengths are in transport/wait_budget.h, shared with TCP).
//
// The waiter sleeps on the futex word of its side of the segment. It first announces itself
// (sleepers++), then re-checks; a producer publishes first, then looks at sleepers and only then
// pays for FUTEX_WAKE. Both sides use sequentially consistent order for that pair of operations,
// so either the sleeper sees the news or the producer sees the sleeper: no lost wake-up, and no
// syscall on the fast path. Sleeps are capped at kMaxSleepNs as a safety net.
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/wait_budget.h"

namespace braid::transport::shm {

using transport::CpuRelax;
using transport::EndNs;
using transport::NowNs;
using transport::WaitBudget;

constexpr int64_t kMaxSleepNs = 100'000'000;

// Sleeps while *word == expected, at most `timeout_ns`, on a futex shared between processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
// Wakes every sleeper of *word.
void FutexWakeAll(std::atomic<uint32_t>* word);

// For a producer that just published something the side owning (`wake_seq`, `sleepers`) may be
// waiting for: wakes it only if it announced it sleeps (see the comment at the top).
inline void WakeIfSleeping(std::atomic<uint32_t>* wake_seq, std::atomic<uint32_t>* sleepers) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers->load(std::memory_order_relaxed) == 0) return;
  wake_seq->fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(wake_seq);
}

}  // namespace braid::transport::shm
