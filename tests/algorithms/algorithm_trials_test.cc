// AlgorithmTrials on its own: which calls are tried, the block schedule, the totals each rank
// reports, rounds with longer blocks, and the verdict. Two stand-in algorithms; costs are given
// directly in the Ranking.
#include <catch2/catch.hpp>

#include <array>
#include <optional>
#include <vector>

#include "algorithms/algorithm_trials.h"

namespace braid::algorithms {
namespace {

const Algorithm kPick{"pick", Collective::kBroadcast, nullptr, nullptr};
const Algorithm kRunnerUp{"runner-up", Collective::kBroadcast, nullptr, nullptr};

Ranking Ranked(double pick_cost, double runner_up_cost) {
  return Ranking{&kPick, pick_cost, &kRunnerUp, runner_up_cost};
}

CollectiveArgs Broadcast(size_t count) {
  CollectiveArgs args;
  args.kind = Collective::kBroadcast;
  args.count = count;
  return args;
}

// Blocks of `calls` in the first round, growing 4x up to `max_calls`; a round decides once its
// blocks took `target_us` per rank.
TrialOptions Blocks(int calls, int max_calls = 4096, double target_us = 0) {
  TrialOptions options;
  options.first_block_calls = calls;
  options.max_block_calls = max_calls;
  options.target_block_us = target_us;
  options.min_ranks = 2;  // the rounds and verdicts below are the same at any rank count
  return options;
}

// Runs one round of `trials` for `args`, each call of the pick taking `pick_us` and of the
// runner-up `runner_up_us`; returns the algorithms run and this rank's totals.
std::array<double, 2> RunRound(AlgorithmTrials& trials, const CollectiveArgs& args, int nranks,
                               double pick_us, double runner_up_us,
                               std::vector<const Algorithm*>* ran = nullptr) {
  for (int call = 0;; ++call) {
    const AlgorithmTrials::Plan plan = trials.Next(args, nranks, Ranked(1, 1));
    REQUIRE(plan.trial != nullptr);
    if (ran != nullptr) ran->push_back(plan.algorithm);
    const std::optional<std::array<double, 2>> totals =
        trials.Record(plan.trial, plan.algorithm == &kPick ? pick_us : runner_up_us);
    if (totals) return *totals;
    REQUIRE(call < 4 * 4096);
  }
}

}  // namespace

TEST_CASE("by default only exact ties of 3 or more ranks, up to 512 KiB, are tried", "[trials]") {
  const CollectiveArgs args = Broadcast(256);  // 1 KiB of float32
  SECTION("an exact tie: a trial call") {
    AlgorithmTrials trials(Blocks(2));
    CHECK(trials.Next(args, 3, Ranked(10, 10)).trial != nullptr);
  }
  SECTION("1% apart: the pick, untimed; with a 25% margin, a trial") {
    AlgorithmTrials trials(Blocks(2));
    const AlgorithmTrials::Plan plan = trials.Next(args, 4, Ranked(10, 10.1));
    CHECK(plan.trial == nullptr);
    CHECK(plan.algorithm == &kPick);
    TrialOptions wide = Blocks(2);
    wide.margin = 0.25;
    AlgorithmTrials wider(wide);
    CHECK(wider.Next(args, 4, Ranked(10, 12.5)).trial != nullptr);
    CHECK(wider.Next(Broadcast(512), 4, Ranked(10, 12.6)).trial == nullptr);
  }
  SECTION("two ranks: untimed unless min_ranks allows them (BRAID_TUNE=2)") {
    AlgorithmTrials trials{TrialOptions()};
    CHECK(trials.Next(args, 2, Ranked(10, 10)).trial == nullptr);
    TrialOptions options;
    options.min_ranks = 2;
    AlgorithmTrials two(options);
    CHECK(two.Next(args, 2, Ranked(10, 10)).trial != nullptr);
    CHECK(two.Next(Broadcast(512), 1, Ranked(0, 0)).trial == nullptr);  // never one rank
  }
  SECTION("no runner-up") {
    AlgorithmTrials trials(Blocks(2));
    CHECK(trials.Next(args, 4, Ranking{&kPick, 10, nullptr, 0}).trial == nullptr);
  }
  SECTION("512 KiB is tried, a byte more is not") {
    AlgorithmTrials trials(Blocks(2));
    CollectiveArgs bytes = args;
    bytes.type = DataType::kUint8;
    bytes.count = 512 << 10;
    CHECK(trials.Next(bytes, 4, Ranked(10, 10)).trial != nullptr);
    bytes.count += 1;
    CHECK(trials.Next(bytes, 4, Ranked(10, 10)).trial == nullptr);
  }
  SECTION("turned off (BRAID_TUNE=0)") {
    TrialOptions options = Blocks(2);
    options.enabled = false;
    AlgorithmTrials trials(options);
    CHECK(trials.Next(args, 4, Ranked(10, 10)).trial == nullptr);
  }
  SECTION("no keys left: later keys keep the pick, the started trial goes on") {
    TrialOptions options = Blocks(2);
    options.max_keys = 1;
    AlgorithmTrials trials(options);
    CHECK(trials.Next(args, 4, Ranked(10, 10)).trial != nullptr);
    CHECK(trials.Next(Broadcast(512), 4, Ranked(10, 10)).trial == nullptr);
    CHECK(trials.Next(args, 4, Ranked(10, 10)).trial != nullptr);
  }
}

TEST_CASE("a round runs pick, runner-up, runner-up, pick; totals skip each block's first call",
          "[trials]") {
  AlgorithmTrials trials(Blocks(3));
  const CollectiveArgs args = Broadcast(256);
  // Calls of the pick take 5 us, of the runner-up 3 us; the first call of every block takes
  // 100 us more (it waits for the other algorithm's calls to drain) and is not counted.
  std::vector<const Algorithm*> ran;
  std::optional<std::array<double, 2>> totals;
  for (int call = 0; call < 12; ++call) {
    CAPTURE(call);
    REQUIRE_FALSE(totals.has_value());
    const AlgorithmTrials::Plan plan = trials.Next(args, 3, Ranked(10, 10));
    REQUIRE(plan.trial != nullptr);
    ran.push_back(plan.algorithm);
    totals = trials.Record(plan.trial, (plan.algorithm == &kPick ? 5.0 : 3.0) +
                                           (call % 3 == 0 ? 100.0 : 0.0));
  }
  const std::vector<const Algorithm*> expected = {
      &kPick,     &kPick,     &kPick,     &kRunnerUp, &kRunnerUp, &kRunnerUp,
      &kRunnerUp, &kRunnerUp, &kRunnerUp, &kPick,     &kPick,     &kPick};
  CHECK(ran == expected);
  REQUIRE(totals.has_value());
  CHECK(totals.value() == std::array<double, 2>{4 * 5.0, 4 * 3.0});
}

TEST_CASE("short blocks lead to another round with longer ones, up to the maximum", "[trials]") {
  // Blocks must take 1000 us per rank; calls take 10 us, so 16 calls per block are too few,
  // 64 too (630 us timed), 256 enough.
  AlgorithmTrials trials(Blocks(16, 4096, 1000));
  const CollectiveArgs args = Broadcast(256);
  const int nranks = 2;
  std::vector<int> rounds;
  AlgorithmTrials::Verdict verdict;
  while (verdict.winner == nullptr) {
    std::vector<const Algorithm*> ran;
    const std::array<double, 2> mine = RunRound(trials, args, nranks, 10.0, 11.0, &ran);
    rounds.push_back(static_cast<int>(ran.size()) / 4);
    // Both ranks measured the same.
    const AlgorithmTrials::Plan plan = trials.Next(args, nranks, Ranked(1, 1));
    verdict = trials.Conclude(plan.trial, {2 * mine[0], 2 * mine[1]});
    if (verdict.winner == nullptr) CHECK(verdict.next_block_calls == 4 * rounds.back());
    REQUIRE(rounds.size() < 6);
  }
  CHECK(rounds == std::vector<int>{16, 64, 256});
  CHECK(verdict.block_calls == 256);
  CHECK(verdict.winner == &kPick);
  CHECK(verdict.mean_us[0] == Approx(2 * 10.0));  // mean call, summed over the 2 ranks
  CHECK(verdict.mean_us[1] == Approx(2 * 11.0));

  SECTION("the largest block decides however short it was") {
    AlgorithmTrials capped(Blocks(16, 64, 1e9));
    RunRound(capped, args, nranks, 1.0, 1.0);
    AlgorithmTrials::Plan plan = capped.Next(args, nranks, Ranked(1, 1));
    CHECK(capped.Conclude(plan.trial, {30, 30}).next_block_calls == 64);
    RunRound(capped, args, nranks, 1.0, 1.0);
    plan = capped.Next(args, nranks, Ranked(1, 1));
    CHECK(capped.Conclude(plan.trial, {126, 120}).winner == &kRunnerUp);
  }
}

TEST_CASE("the verdict: the lower sum wins, a tie keeps the pick, the winner is then served",
          "[trials]") {
  const CollectiveArgs args = Broadcast(256);
  const auto conclude = [&](AlgorithmTrials& trials, std::array<double, 2> summed) {
    RunRound(trials, args, 2, 1.0, 1.0);
    return trials.Conclude(trials.Next(args, 2, Ranked(1, 1)).trial, summed);
  };
  SECTION("the runner-up's sum is lower") {
    AlgorithmTrials trials(Blocks(2));
    const AlgorithmTrials::Verdict verdict = conclude(trials, {7.5, 7.0});
    CHECK(verdict.winner == &kRunnerUp);
    CHECK(verdict.mean_us == std::array<double, 2>{3.75, 3.5});  // over 2 timed calls
    for (int call = 0; call < 3; ++call) {
      const AlgorithmTrials::Plan plan = trials.Next(args, 2, Ranked(1, 1));
      CHECK(plan.trial == nullptr);
      CHECK(plan.algorithm == &kRunnerUp);
    }
  }
  SECTION("equal sums") {
    AlgorithmTrials trials(Blocks(2));
    CHECK(conclude(trials, {4.0, 4.0}).winner == &kPick);
    CHECK(trials.Next(args, 2, Ranked(1, 1)).algorithm == &kPick);
  }
  SECTION("a stray time after the verdict changes nothing") {
    AlgorithmTrials trials(Blocks(2));
    const AlgorithmTrials::Plan last = trials.Next(args, 2, Ranked(1, 1));
    conclude(trials, {1.0, 2.0});
    CHECK_FALSE(trials.Record(last.trial, 1.0).has_value());
    CHECK(trials.Next(args, 2, Ranked(1, 1)).algorithm == &kPick);
  }
  SECTION("each key has its own trial") {
    AlgorithmTrials trials(Blocks(2));
    conclude(trials, {1.0, 2.0});
    CollectiveArgs rooted = args;
    rooted.root = 1;
    CHECK(trials.Next(rooted, 2, Ranked(1, 1)).trial != nullptr);
    CHECK(trials.Next(args, 2, Ranked(1, 1)).trial == nullptr);
  }
}

}  // namespace braid::algorithms
