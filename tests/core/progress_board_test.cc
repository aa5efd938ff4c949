// core/hang_diagnosis.h's ProgressBoard: what the hang-diagnosis thread reads while the
// communicator's thread keeps entering and leaving collectives is always one whole state.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/hang_diagnosis.h"

namespace braid {
namespace {

// What Enter() is given for collective `sequence` in the test below: the op alternates and the
// byte count is derived from the sequence, so a torn read shows up as a mismatch.
const char* OpFor(uint64_t sequence) { return sequence % 2 == 0 ? "allreduce" : "broadcast"; }
size_t BytesFor(uint64_t sequence) { return sequence * 8 + 3; }

TEST_CASE("ProgressBoard describes idle, inside and after") {
  ProgressBoard board;
  CHECK(board.Describe() == "idle; has entered no collective yet");
  CHECK(board.LastSequence() == -1);
  board.Enter(12, "allreduce", 4096);
  CHECK(board.Describe() == "in allreduce #12 (4096 bytes)");
  CHECK(board.LastSequence() == 12);
  board.Leave();
  CHECK(board.Describe() == "idle; last entered allreduce #12 (4096 bytes)");
  CHECK(board.LastSequence() == 12);
}

TEST_CASE("ProgressBoard never shows a half-written state to a concurrent reader") {
  ProgressBoard board;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t s = 0; s < 200000; ++s) {
      board.Enter(s, OpFor(s), BytesFor(s));
      board.Leave();
    }
    done = true;
  });
  int reads = 0;
  while (!done.load() || reads == 0) {
    const std::string state = board.Describe();
    ++reads;
    if (state == "idle; has entered no collective yet") continue;
    // "in <op> #<seq> (<bytes> bytes)" or "idle; last entered <op> #<seq> (<bytes> bytes)".
    const size_t hash = state.find('#');
    REQUIRE(hash != std::string::npos);
    const uint64_t sequence = std::strtoull(state.c_str() + hash + 1, nullptr, 10);
    const std::string prefix = state.rfind("in ", 0) == 0 ? "in " : "idle; last entered ";
    const std::string expected = prefix + OpFor(sequence) + " #" + std::to_string(sequence) +
                                 " (" + std::to_string(BytesFor(sequence)) + " bytes)";
    REQUIRE(state == expected);
  }
  writer.join();
  CHECK(board.Describe() == "idle; last entered broadcast #199999 (1599995 bytes)");
}

}  // namespace
}  // namespace braid
