// algorithms/primitives.h's InlineFifo, the queue Primitives keeps its moves and sends in: order
// and contents against std::deque (the container it replaced) across the spill to the heap, and
// release of what popped entries held.
#include <catch2/catch.hpp>

#include <deque>
#include <memory>
#include <random>

#include "algorithms/primitives.h"

namespace braid::algorithms {
namespace {

TEST_CASE("InlineFifo keeps first-in first-out order like std::deque, inline and spilled") {
  // Random pushes and pops with the queue length wandering from 0 to well past the inline
  // capacity, so entries wrap around the inline slots, move to the heap mid-wrap, and wrap there.
  InlineFifo<std::unique_ptr<int>, 4> fifo;
  std::deque<int> reference;
  std::mt19937 random(12345);
  int next = 0;
  for (int step = 0; step < 20000; ++step) {
    // Drift upwards in the first half, downwards in the second.
    const bool push = reference.empty() || (random() % 100) < (step < 10000 ? 60u : 40u);
    if (push) {
      fifo.push_back(std::make_unique<int>(next));
      reference.push_back(next);
      ++next;
    } else {
      REQUIRE(*fifo.front() == reference.front());
      fifo.pop_front();
      reference.pop_front();
    }
    REQUIRE(fifo.size() == reference.size());
    REQUIRE(fifo.empty() == reference.empty());
    if (!reference.empty()) REQUIRE(*fifo.front() == reference.front());
  }
  while (!reference.empty()) {
    REQUIRE(*fifo.front() == reference.front());
    fifo.pop_front();
    reference.pop_front();
  }
  CHECK(fifo.empty());
}

TEST_CASE("InlineFifo releases what popped and leftover entries hold") {
  auto counted = std::make_shared<int>(7);
  {
    InlineFifo<std::shared_ptr<int>, 2> fifo;
    for (int i = 0; i < 5; ++i) fifo.push_back(counted);  // spills past 2
    CHECK(counted.use_count() == 6);
    fifo.pop_front();
    fifo.pop_front();
    CHECK(counted.use_count() == 4);
  }  // three entries left: the destructor releases them
  CHECK(counted.use_count() == 1);
}

}  // namespace
}  // namespace braid::algorithms
