// Timed trials that settle the cost model's near-ties on the job's own calls.
//
// Why: the model prices some pairs of algorithms alike, and which one is faster then depends on
// the state of the machine rather than on anything the model knows. Where ranks take turns on
// the cores, the chain and the binomial broadcast do the same total work; on the development VM
// the 4-rank broadcast at 8 KiB was the chain's on the evening of 2026-11-23 (0.72-0.78 against
// 0.91-1.02 us) and the binomial tree's the next morning (1.29-1.36 against 1.44-1.76 us), so no
// fixed pick is right in both states. Where the runner-up is predicted within `margin` of the
// pick, the first calls of that exact call (collective, count, datatype, op, root) run both
// algorithms instead, in four blocks of `block_calls` calls: pick, runner-up, runner-up, pick (the
// mirrored order cancels a steady drift of the machine). Each rank clocks the end of every trial
// call; a block's time runs from the end of its first call to the end of its last, so the first
// call after a switch, which waits for the other algorithm's last call to drain, is not counted.
// At the end the ranks sum their per-call means with one small allreduce (the communicator runs
// it), and the lower sum runs every later call of that key. The mean over whole blocks, because
// that is what a loop of calls pays: on ranks that take turns on the cores a call's time is
// bimodal (it returns at once, or waits a time slice for a peer), and a median that skips the
// slow mode picked the binomial reduce at 4 ranks where the chain was 1.2-1.5x faster
// (select_check 2026-11-24 05:34).
//
// Every rank makes the same calls in the same order (the collective contract), the model and the
// policy are the same everywhere, and the schedule depends only on how many trial calls a key has
// had, so every rank runs the same algorithm in every call and all settle on the same winner.
//
// Thread safety: none (the communicator calls it under its operation lock).
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <optional>
#include <tuple>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

struct TrialOptions {
  // BRAID_TUNE=0 turns trials off: every call runs the model's pick.
  bool enabled = true;
  // A trial runs where the runner-up's predicted time is at most (1 + margin) x the pick's.
  double margin = 0.25;
  // Only for calls up to this many bytes (CollectiveArgs::MessageBytes): above it a call takes
  // long enough that 4 x block_calls calls of the slower algorithm would cost the job noticeably,
  // and the bandwidth terms that decide there are the model's firmer ones.
  size_t max_bytes = 1 << 20;
  // Calls per block (each algorithm runs 2 blocks; the first call of each is not timed), >= 2.
  int block_calls = 16;
  // At most this many keys are tried per communicator; later keys keep the model's pick, so a
  // job with endlessly varying counts neither grows the table nor keeps paying for trials.
  size_t max_keys = 256;
};

class AlgorithmTrials {
 public:
  explicit AlgorithmTrials(TrialOptions options = {}) : options_(options) {}

  struct Plan {
    const Algorithm* algorithm = nullptr;
    // True for a trial call: hand the time it ended to Record.
    bool timed = false;
  };
  // What runs `args`, given the model's ranking: the settled winner, a trial's algorithm, or the
  // model's pick where the call is no near-tie (or no more keys may be tried).
  Plan Next(const CollectiveArgs& args, int nranks, const Ranking& ranking);

  // When the trial call just planned for `args` ended (a steady clock, in microseconds). After
  // the key's last trial call, returns this rank's mean time per call of {pick, runner-up}, for
  // the communicator to sum across ranks and hand to Settle.
  std::optional<std::array<double, 2>> Record(const CollectiveArgs& args, double end_us);

  struct Verdict {
    const Algorithm* winner = nullptr;
    const Algorithm* loser = nullptr;
    double winner_us = 0;  // their summed means per call
    double loser_us = 0;
  };
  // Ends the trial of `args` with the ranks' summed means (the same on every rank).
  Verdict Settle(const CollectiveArgs& args, const std::array<double, 2>& summed_us);

  // The number of calls one trial takes.
  int TrialCalls() const { return 4 * options_.block_calls; }

 private:
  using Key = std::tuple<int, size_t, int, int, int>;  // kind, count, type, op, root
  static Key KeyOf(const CollectiveArgs& args);
  struct Trial {
    std::array<const Algorithm*, 2> candidates{};  // the model's pick, then the runner-up
    int calls = 0;                                 // trial calls recorded so far
    double block_start_us = 0;                     // end of the current block's first call
    std::array<double, 2> timed_us{};              // blocks' times, per candidate
    const Algorithm* winner = nullptr;             // set once settled
  };
  // Which candidate the `call`-th trial call runs: blocks 0 and 3 the pick, 1 and 2 the runner-up.
  int CandidateOf(int call) const;

  const TrialOptions options_;
  std::map<Key, Trial> trials_;
};

}  // namespace braid::algorithms
