// LightLock (core/base/light_lock.h): mutual exclusion under contention, try_lock, and a
// waiter that outlasts the spin and yield phases (a holder copying for milliseconds).
#include "core/base/light_lock.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using braid::LightLock;

TEST_CASE("light lock: threads hammering one lock never overlap", "[core]") {
  LightLock lock;
  long counter = 0;  // plain: lost updates would show if two holders overlapped
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  constexpr int kThreads = 4, kRounds = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<LightLock> guard(lock);
        if (inside.fetch_add(1) != 0) overlapped = true;
        ++counter;
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK_FALSE(overlapped.load());
  CHECK(counter == long{kThreads} * kRounds);
}

TEST_CASE("light lock: try_lock fails while held and succeeds once released", "[core]") {
  LightLock lock;
  REQUIRE(lock.try_lock());
  bool other_got_it = true;
  std::thread([&] { other_got_it = lock.try_lock(); }).join();
  CHECK_FALSE(other_got_it);
  lock.unlock();
  std::thread([&] { other_got_it = lock.try_lock(); }).join();
  CHECK(other_got_it);
  lock.unlock();
}

TEST_CASE("light lock: a waiter gets a lock held for milliseconds", "[core]") {
  LightLock lock;
  lock.lock();
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    std::lock_guard<LightLock> guard(lock);
    acquired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past spinning and yielding
  CHECK_FALSE(acquired.load());
  const auto released = std::chrono::steady_clock::now();
  lock.unlock();
  waiter.join();
  CHECK(acquired.load());
  // It naps between tries, so it notices within a few naps, not at some far timeout.
  CHECK(std::chrono::steady_clock::now() - released < std::chrono::milliseconds(500));
}
