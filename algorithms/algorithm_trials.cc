#include "algorithms/algorithm_trials.h"

#include <algorithm>

namespace braid::algorithms {

AlgorithmTrials::Key AlgorithmTrials::KeyOf(const CollectiveArgs& args) {
  return Key{static_cast<int>(args.kind), args.count, static_cast<int>(args.type),
             static_cast<int>(args.op), args.root};
}

int AlgorithmTrials::CandidateOf(const Trial& trial, int call) {
  const int block = call / trial.block_calls;
  return block == 1 || block == 2 ? 1 : 0;
}

AlgorithmTrials::Plan AlgorithmTrials::Next(const CollectiveArgs& args, int nranks,
                                            const Ranking& ranking) {
  const bool tried = options_.enabled && nranks >= std::max(options_.min_ranks, 2) &&
                     ranking.runner_up != nullptr &&
                     ranking.runner_up_cost <= ranking.best_cost * (1 + options_.margin) &&
                     args.MessageBytes(nranks) <= options_.max_bytes &&
                     options_.first_block_calls >= 2;
  if (!tried) return Plan{ranking.best, nullptr};
  auto found = trials_.find(KeyOf(args));
  if (found == trials_.end()) {
    if (trials_.size() >= options_.max_keys) return Plan{ranking.best, nullptr};
    Trial trial;
    trial.candidates = {ranking.best, ranking.runner_up};
    trial.nranks = nranks;
    trial.block_calls = options_.first_block_calls;
    found = trials_.emplace(KeyOf(args), trial).first;
  }
  return Continue(&found->second);
}

AlgorithmTrials::Plan AlgorithmTrials::Continue(Trial* trial) const {
  if (trial->winner != nullptr) return Plan{trial->winner, nullptr};
  return Plan{trial->candidates[CandidateOf(*trial, trial->calls)], trial};
}

std::optional<std::array<double, 2>> AlgorithmTrials::Record(Trial* trial, double elapsed_us) {
  if (trial->winner != nullptr) return std::nullopt;
  if (trial->calls % trial->block_calls != 0) {
    trial->timed_us[CandidateOf(*trial, trial->calls)] += elapsed_us;
  }
  if (++trial->calls < 4 * trial->block_calls) return std::nullopt;
  return trial->timed_us;
}

AlgorithmTrials::Verdict AlgorithmTrials::Conclude(Trial* trial,
                                                   const std::array<double, 2>& summed_us) {
  const double timed_calls = 2.0 * (trial->block_calls - 1);
  Verdict verdict;
  verdict.block_calls = trial->block_calls;
  verdict.mean_us = {summed_us[0] / timed_calls, summed_us[1] / timed_calls};
  // Per rank and block, the shorter candidate's blocks took this long.
  const double block_us = std::min(summed_us[0], summed_us[1]) / (2.0 * trial->nranks);
  if (block_us >= options_.target_block_us || trial->block_calls >= options_.max_block_calls) {
    // A tie keeps the model's pick.
    trial->winner = trial->candidates[summed_us[1] < summed_us[0] ? 1 : 0];
    verdict.winner = trial->winner;
    return verdict;
  }
  trial->block_calls = std::min(trial->block_calls * std::max(options_.growth, 2),
                                options_.max_block_calls);
  trial->calls = 0;
  trial->timed_us = {};
  verdict.next_block_calls = trial->block_calls;
  return verdict;
}

}  // namespace braid::algorithms
