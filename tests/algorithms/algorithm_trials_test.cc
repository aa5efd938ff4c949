// AlgorithmTrials on its own: which calls are tried, the block schedule, the mean times each rank
// reports, and the verdict. Two stand-in algorithms; costs are given directly in the Ranking.
#include <catch2/catch.hpp>

#include <array>
#include <optional>
#include <string>
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

TrialOptions Blocks(int calls) {
  TrialOptions options;
  options.block_calls = calls;
  return options;
}

}  // namespace

TEST_CASE("only near-ties of more than one rank, up to the byte limit, are tried", "[trials]") {
  const CollectiveArgs args = Broadcast(256);  // 1 KiB of float32
  SECTION("runner-up within the margin: a trial call") {
    AlgorithmTrials trials(Blocks(2));
    CHECK(trials.Next(args, 4, Ranked(10, 12.5)).timed);
  }
  SECTION("runner-up beyond the margin: the pick, untimed") {
    AlgorithmTrials trials(Blocks(2));
    const AlgorithmTrials::Plan plan = trials.Next(args, 4, Ranked(10, 12.6));
    CHECK_FALSE(plan.timed);
    CHECK(plan.algorithm == &kPick);
  }
  SECTION("no runner-up") {
    AlgorithmTrials trials(Blocks(2));
    CHECK_FALSE(trials.Next(args, 4, Ranking{&kPick, 10, nullptr, 0}).timed);
  }
  SECTION("one rank") {
    AlgorithmTrials trials(Blocks(2));
    CHECK_FALSE(trials.Next(args, 1, Ranked(0, 0)).timed);
  }
  SECTION("above max_bytes") {
    TrialOptions options = Blocks(2);
    options.max_bytes = 1023;
    AlgorithmTrials trials(options);
    CHECK_FALSE(trials.Next(args, 4, Ranked(10, 10)).timed);
  }
  SECTION("turned off (BRAID_TUNE=0)") {
    TrialOptions options = Blocks(2);
    options.enabled = false;
    AlgorithmTrials trials(options);
    CHECK_FALSE(trials.Next(args, 4, Ranked(10, 10)).timed);
  }
  SECTION("no keys left: later keys keep the pick, the started trial goes on") {
    TrialOptions options = Blocks(2);
    options.max_keys = 1;
    AlgorithmTrials trials(options);
    CHECK(trials.Next(args, 4, Ranked(10, 10)).timed);
    CHECK_FALSE(trials.Next(Broadcast(512), 4, Ranked(10, 10)).timed);
    CHECK(trials.Next(args, 4, Ranked(10, 10)).timed);
  }
}

TEST_CASE("a trial runs pick, runner-up, runner-up, pick and reports each one's mean call",
          "[trials]") {
  AlgorithmTrials trials(Blocks(3));
  REQUIRE(trials.TrialCalls() == 12);
  const CollectiveArgs args = Broadcast(256);
  // Calls of the pick take 5 us, of the runner-up 3 us; the first call of every block takes
  // 100 us more (it waits for the other algorithm's calls to drain) and is not counted.
  double clock_us = 1000;
  std::vector<const Algorithm*> ran;
  std::optional<std::array<double, 2>> means;
  for (int call = 0; call < trials.TrialCalls(); ++call) {
    CAPTURE(call);
    REQUIRE_FALSE(means.has_value());
    const AlgorithmTrials::Plan plan = trials.Next(args, 3, Ranked(10, 11));
    REQUIRE(plan.timed);
    ran.push_back(plan.algorithm);
    clock_us += (plan.algorithm == &kPick ? 5.0 : 3.0) + (call % 3 == 0 ? 100.0 : 0.0);
    means = trials.Record(args, clock_us);
  }
  const std::vector<const Algorithm*> expected = {
      &kPick,     &kPick,     &kPick,     &kRunnerUp, &kRunnerUp, &kRunnerUp,
      &kRunnerUp, &kRunnerUp, &kRunnerUp, &kPick,     &kPick,     &kPick};
  CHECK(ran == expected);
  REQUIRE(means.has_value());
  CHECK(means.value() == std::array<double, 2>{5.0, 3.0});
}

TEST_CASE("a slow phase inside a block counts: the mean, not the typical call", "[trials]") {
  // The pick usually takes 1 us but every third call waits 10 (ranks taking turns on the cores);
  // the runner-up takes 3 us every time. A loop of calls pays 4 against 3, so the means say so.
  AlgorithmTrials trials(Blocks(4));
  const CollectiveArgs args = Broadcast(256);
  double clock_us = 0;
  std::optional<std::array<double, 2>> means;
  for (int call = 0; call < trials.TrialCalls(); ++call) {
    const AlgorithmTrials::Plan plan = trials.Next(args, 4, Ranked(10, 10));
    clock_us += plan.algorithm == &kRunnerUp ? 3.0 : (call % 4 == 2 ? 10.0 : 1.0);
    means = trials.Record(args, clock_us);
  }
  REQUIRE(means.has_value());
  CHECK(means.value()[0] == Approx(4.0));
  CHECK(means.value()[1] == Approx(3.0));
}

TEST_CASE("the verdict: the lower sum wins, a tie keeps the pick, the winner is then served",
          "[trials]") {
  const CollectiveArgs args = Broadcast(256);
  const auto run_trial = [&](AlgorithmTrials& trials) {
    std::optional<std::array<double, 2>> means;
    for (int call = 0; call < trials.TrialCalls(); ++call) {
      REQUIRE(trials.Next(args, 2, Ranked(1, 1)).timed);
      means = trials.Record(args, call);
    }
    REQUIRE(means.has_value());
  };
  SECTION("the runner-up's sum is lower") {
    AlgorithmTrials trials(Blocks(2));
    run_trial(trials);
    const AlgorithmTrials::Verdict verdict = trials.Settle(args, {7.5, 7.0});
    CHECK(verdict.winner == &kRunnerUp);
    CHECK(verdict.loser == &kPick);
    CHECK(verdict.winner_us == 7.0);
    CHECK(verdict.loser_us == 7.5);
    for (int call = 0; call < 3; ++call) {
      const AlgorithmTrials::Plan plan = trials.Next(args, 2, Ranked(1, 1));
      CHECK_FALSE(plan.timed);
      CHECK(plan.algorithm == &kRunnerUp);
    }
    // A stray time after the verdict changes nothing.
    CHECK_FALSE(trials.Record(args, 1.0).has_value());
  }
  SECTION("equal sums") {
    AlgorithmTrials trials(Blocks(2));
    run_trial(trials);
    CHECK(trials.Settle(args, {4.0, 4.0}).winner == &kPick);
    CHECK(trials.Next(args, 2, Ranked(1, 1)).algorithm == &kPick);
  }
  SECTION("each key has its own trial") {
    AlgorithmTrials trials(Blocks(2));
    run_trial(trials);
    trials.Settle(args, {1.0, 2.0});
    CollectiveArgs rooted = args;
    rooted.root = 1;
    CHECK(trials.Next(rooted, 2, Ranked(1, 1)).timed);
    CHECK_FALSE(trials.Next(args, 2, Ranked(1, 1)).timed);
  }
}

}  // namespace braid::algorithms
