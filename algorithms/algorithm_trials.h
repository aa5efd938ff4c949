// Timed trials that settle the cost model's ties on the job's own calls.
//
// Why: the model prices some pairs of algorithms alike, and which one is faster then depends on
// the state of the machine rather than on anything the model knows. Where ranks take
// turns on the cores, the chain and the binomial broadcast do the same total work; on the
// development VM the 4-rank broadcast at 8 KiB was the chain's on the evening of 2026-11-23
// (0.72-0.78 against 0.91-1.02 us) and the binomial tree's the next morning (1.29-1.36 against
// 1.44-1.76 us), so no fixed pick is right in both states. Where the model ties two algorithms
// (by default exactly: the same predicted time; `margin` widens it), the calls of that exact call
// (collective, count, datatype, op, root) run both until the job's own timings say which is
// faster.
//
// Only exact ties, from 3 ranks, up to 512 KiB, by default: a trial runs the slower algorithm on
// half of its calls, and its timing costs ~70 ns a call, which sub-microsecond calls feel. With a
// 25% margin the trials also took in the gather and scatter, whose direct algorithm the model
// already picks right, and the 8-byte reduce at 4 ranks timed 0.6 against 0.2 us while trials
// ran. With two ranks the model's exact ties are the same messages (one send, or one exchange:
// the chain and the binomial broadcast or reduce, rd and the direct allreduce), so a trial
// compares code paths within noise; the 2-rank reduce at 8 KiB settled on the slower one
// (select_check 2026-11-24 05:47, 1.15 by the pairs).
//
// A trial is a sequence of rounds. A round is four blocks of K calls: pick, runner-up, runner-up,
// pick (the mirrored order cancels a steady drift of the machine). Each rank times every call
// from its start to its end; the first call of a block is not counted, since it waits for the
// other algorithm's last calls to drain. At the end of a round the ranks sum their timed totals
// with one small allreduce (the communicator runs it). If the round's blocks were long enough
// (`target_block_us` per block and rank) or K has reached its maximum, the lower sum runs every
// later call of that key; otherwise the next round takes K times `growth` calls per block.
//
// Why sums of whole calls, and why long blocks: a loop of calls pays the mean, and where ranks
// take turns on the cores a call's time is bimodal (it returns at once, or waits a time slice for
// a peer). Per-call medians skipped the slow mode and picked the binomial reduce at 4 ranks where
// the chain was 1.2-1.5x faster; blocks of 16 sub-microsecond calls (a few microseconds, well
// under a scheduler time slice) picked the binomial broadcast at 8 B in 6 runs of 6 where the
// chain was 1.6x faster, and blocks of 2 ms did not. Over TCP, where a call waits on another
// process's socket, 2 ms blocks settled the 4-rank 128-byte reduce on the chain in 1 run of 3
// while the binomial tree was 2x faster; blocks of 10 ms (4096 calls) settled it on the tree in
// 3 of 3 (select_check and probes, 2026-11-24). The
// calls' own durations, not the wall time of a block, so that the work between calls (a training
// step) does not enter the comparison.
//
// Every rank makes the same calls in the same order (the collective contract), the model and the
// policy are the same everywhere, the schedule depends only on how many trial calls a key has had,
// and each round's outcome on the summed totals every rank receives alike, so every rank runs the
// same algorithm in every call and all settle on the same winner.
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
  // A trial runs where the runner-up's predicted time is at most (1 + margin) x the pick's: by
  // default where the model ties them (to rounding, as the selector's own tie-break).
  double margin = 1e-9;
  // Only for jobs of at least this many ranks (see above for 2).
  int min_ranks = 3;
  // Only for calls up to this many bytes (CollectiveArgs::MessageBytes): above it a call takes
  // long enough that a round of the slower algorithm costs the job noticeably, and the bandwidth
  // terms that decide there are the model's firmer ones.
  size_t max_bytes = 512 << 10;
  // Calls per block in the first round (>= 2: the first call of a block is not timed), the factor
  // between rounds, and the largest block.
  int first_block_calls = 16;
  int growth = 4;
  int max_block_calls = 4096;
  // A round decides once its blocks took this long on average per rank (timed calls only).
  double target_block_us = 10000;
  // At most this many keys are tried per communicator; later keys keep the model's pick, so a
  // job with endlessly varying counts neither grows the table nor keeps paying for trials.
  size_t max_keys = 256;
};

class AlgorithmTrials {
 public:
  explicit AlgorithmTrials(TrialOptions options = {}) : options_(options) {}

  // One key's trial (opaque to callers; stable for the life of the AlgorithmTrials).
  struct Trial {
    std::array<const Algorithm*, 2> candidates{};  // the model's pick, then the runner-up
    int nranks = 0;
    int block_calls = 0;                           // K of the current round
    int calls = 0;                                 // calls of the current round recorded
    std::array<double, 2> timed_us{};              // this round's timed calls, per candidate
    const Algorithm* winner = nullptr;             // set once settled
  };

  struct Plan {
    const Algorithm* algorithm = nullptr;
    // Non-null for a trial call: time it and hand the time to Record.
    Trial* trial = nullptr;
  };
  // What runs `args`, given the model's ranking: the settled winner, a trial's algorithm, or the
  // model's pick where the call is not tried (no tie, or no more keys may be tried).
  Plan Next(const CollectiveArgs& args, int nranks, const Ranking& ranking);
  // Next for a key whose trial the caller already holds (no lookup).
  Plan Continue(Trial* trial) const;

  // The time of the trial call just planned. At the end of a round, returns this rank's timed
  // totals of {pick, runner-up}, for the communicator to sum across ranks and hand to Conclude.
  std::optional<std::array<double, 2>> Record(Trial* trial, double elapsed_us);

  struct Verdict {
    const Algorithm* winner = nullptr;  // null: another round follows
    // The pick's and the runner-up's mean call, summed over the ranks.
    std::array<double, 2> mean_us{};
    int block_calls = 0;                // K of the round that ended
    int next_block_calls = 0;           // K of the next round, if there is one
  };
  // Ends a round with the ranks' summed totals (the same on every rank): settles the trial, or
  // starts the next round with longer blocks.
  Verdict Conclude(Trial* trial, const std::array<double, 2>& summed_us);

 private:
  using Key = std::tuple<int, size_t, int, int, int>;  // kind, count, type, op, root
  static Key KeyOf(const CollectiveArgs& args);
  // Which candidate the `call`-th call of a round runs: blocks 0 and 3 the pick, 1 and 2 the
  // runner-up.
  static int CandidateOf(const Trial& trial, int call);

  const TrialOptions options_;
  std::map<Key, Trial> trials_;
};

}  // namespace braid::algorithms
