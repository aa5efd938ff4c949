#include "algorithms/algorithm_trials.h"

namespace braid::algorithms {

AlgorithmTrials::Key AlgorithmTrials::KeyOf(const CollectiveArgs& args) {
  return Key{static_cast<int>(args.kind), args.count, static_cast<int>(args.type),
             static_cast<int>(args.op), args.root};
}

int AlgorithmTrials::CandidateOf(int call) const {
  const int block = call / options_.block_calls;
  return block == 1 || block == 2 ? 1 : 0;
}

AlgorithmTrials::Plan AlgorithmTrials::Next(const CollectiveArgs& args, int nranks,
                                            const Ranking& ranking) {
  const bool near_tie = options_.enabled && nranks > 1 && ranking.runner_up != nullptr &&
                        ranking.runner_up_cost <= ranking.best_cost * (1 + options_.margin) &&
                        args.MessageBytes(nranks) <= options_.max_bytes &&
                        options_.block_calls >= 2;
  if (!near_tie) return Plan{ranking.best, false};
  auto found = trials_.find(KeyOf(args));
  if (found == trials_.end()) {
    if (trials_.size() >= options_.max_keys) return Plan{ranking.best, false};
    Trial trial;
    trial.candidates = {ranking.best, ranking.runner_up};
    found = trials_.emplace(KeyOf(args), std::move(trial)).first;
  }
  Trial& trial = found->second;
  if (trial.winner != nullptr) return Plan{trial.winner, false};
  return Plan{trial.candidates[CandidateOf(trial.calls)], true};
}

std::optional<std::array<double, 2>> AlgorithmTrials::Record(const CollectiveArgs& args,
                                                             double end_us) {
  auto found = trials_.find(KeyOf(args));
  if (found == trials_.end() || found->second.winner != nullptr) return std::nullopt;
  Trial& trial = found->second;
  const int in_block = trial.calls % options_.block_calls;
  if (in_block == 0) trial.block_start_us = end_us;
  if (in_block == options_.block_calls - 1) {
    trial.timed_us[CandidateOf(trial.calls)] += end_us - trial.block_start_us;
  }
  if (++trial.calls < TrialCalls()) return std::nullopt;
  const double timed_calls = 2.0 * (options_.block_calls - 1);
  return std::array<double, 2>{trial.timed_us[0] / timed_calls, trial.timed_us[1] / timed_calls};
}

AlgorithmTrials::Verdict AlgorithmTrials::Settle(const CollectiveArgs& args,
                                                 const std::array<double, 2>& summed_us) {
  auto found = trials_.find(KeyOf(args));
  if (found == trials_.end()) return Verdict{};
  Trial& trial = found->second;
  // A tie keeps the model's pick.
  const int winner = summed_us[1] < summed_us[0] ? 1 : 0;
  trial.winner = trial.candidates[winner];
  return Verdict{trial.winner, trial.candidates[1 - winner], summed_us[winner],
                 summed_us[1 - winner]};
}

}  // namespace braid::algorithms
