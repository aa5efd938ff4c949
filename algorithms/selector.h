// Which algorithm runs a collective: BRAID_ALGO's constraints first, then the cheapest under the
// cost model.
//
// BRAID_ALGO follows NCCL_ALGO's list syntax (NCCL 2.24+ parseList), with braid's collective names:
//   "ring"                            ring wherever a collective has it
//   "allreduce:tree;broadcast:ring"   per collective; others unconstrained
//   "^tree" / "allreduce:^ring,rd"    exclude (a leading ^ negates the whole list)
//   "^ring;allreduce:ring"            a global list first, then per-collective lists that
//                                     replace it for their collective
// Entries are separated by ';', names in a list by ','. Only the first entry may omit the
// collective. Names are case-insensitive and spaces around them are ignored.
//
// Errors (InvalidArgument, quoting BRAID_ALGO and naming the culprit, at communicator creation):
// an unknown collective; an algorithm name no collective has (global list) or the collective
// lacks (per-collective list, the message lists the ones it has); an empty list; an unprefixed
// entry after the first; a collective given twice; a per-collective list that leaves it no
// algorithm. A global list never empties a collective: a collective the global list would leave
// without any algorithm (say "ring" or "^ring" for a collective whose only algorithm is ring, or
// that has no ring) keeps all of its own.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/algorithm_trials.h"
// The link model a communicator's selector is built with: DefaultLinkModel, from the
// calibration its ranks agreed on (rank 0's).
#include "algorithms/calibration.h"
#include "core/base/status.h"

namespace braid::algorithms {

class AlgorithmPolicy {
 public:
  // No constraint.
  AlgorithmPolicy() = default;
  // "" (or only separators and spaces) means no constraint.
  static Result<AlgorithmPolicy> Parse(const std::string& spec);
  // Whether `algorithm` may run `kind`. Thread-safe (const).
  bool Allows(Collective kind, const char* algorithm) const;
  const std::string& spec() const { return spec_; }

 private:
  struct Rule {
    bool exclude = false;
    std::vector<std::string> names;
    bool Lists(const char* algorithm) const;
    bool Allows(const char* algorithm) const { return Lists(algorithm) != exclude; }
  };
  // Whether the global rule leaves `kind` at least one registered algorithm.
  bool GlobalRuleApplies(Collective kind) const;

  std::string spec_;
  std::optional<Rule> global_;
  std::optional<Rule> per_collective_[kNumCollectives];
};

// The two allowed algorithms with the lowest predicted times for `args` on `nranks` ranks (ties to
// the one registered first; an algorithm without a cost function counts as infinitely slow).
// InvalidArgument as SelectAlgorithm.
Result<Ranking> RankAlgorithms(const CollectiveArgs& args, int nranks,
                               const AlgorithmPolicy& policy, const LinkModel& link);

// The allowed algorithm for `args` with the lowest predicted time on `nranks` ranks; ties go to
// the one registered first. An algorithm without a cost function is only chosen when nothing else
// is allowed. InvalidArgument, naming the collective and BRAID_ALGO, if none is allowed.
Result<const Algorithm*> SelectAlgorithm(const CollectiveArgs& args, int nranks,
                                         const AlgorithmPolicy& policy, const LinkModel& link);

// For the INFO line of a communicator that spans hosts: per collective with a two-level
// algorithm, the message size from which the cost model picks "hier" under `policy` (float32,
// powers of two from 8 B to 1 GiB), e.g. "allreduce from 64 KiB, broadcast from 8 B, reduce
// never, ...".
std::string TwoLevelChoices(const AlgorithmPolicy& policy, int nranks, const LinkModel& link);

// SelectAlgorithm for one communicator, remembering the last answer per collective, with the
// model's ties settled by timed trials (algorithms/algorithm_trials.h).
//
// Why the memory: the choice depends only on the arguments that reach the cost model (count,
// type, op, root; never the buffers), on the policy, rank count and link model, which are fixed
// for a communicator's life, and on the trials, which every rank runs alike; evaluating every
// cost function on every call is measurable on small collectives, whose whole call is well under
// a microsecond, and training loops repeat the same call. Every rank reuses an answer it would
// recompute identically, so ranks still agree. For arguments on trial it remembers the trial, so
// that a trial call costs no cost-model evaluation either (its calls may be sub-microsecond).
//
// `link` is the job's model (DefaultLinkModel, algorithms/calibration.h), fixed for the
// communicator's life.
//
// Thread safety: none (the communicator calls it under its operation lock).
class CachedSelector {
 public:
  CachedSelector(int nranks, AlgorithmPolicy policy, LinkModel link, TrialOptions trials = {})
      : nranks_(nranks), policy_(std::move(policy)), link_(link), trials_(trials) {}
  // What runs `args`: the model's pick, or where it is a tie, a trial call (plan.trial set:
  // hand the call's time to RecordTrial) or the trial's winner. Errors are returned, not
  // remembered.
  Result<AlgorithmTrials::Plan> Select(const CollectiveArgs& args);
  // The settled algorithm of the last call of this collective if `args` match it (no trial in
  // progress), else nullptr: then call Select. Why inline: a loop calling one collective with
  // the same arguments is the common case, and Select's Result cost a fifth of its instructions.
  const Algorithm* Settled(const CollectiveArgs& args) const {
    const int kind = static_cast<int>(args.kind);
    if (kind < 0 || kind >= kNumCollectives) return nullptr;
    const Choice& last = last_[kind];
    const bool same = last.valid && last.count == args.count && last.type == args.type &&
                      last.op == args.op && last.root == args.root;
    return same && last.trial == nullptr ? last.algorithm : nullptr;
  }
  // AlgorithmTrials::Record and Conclude.
  std::optional<std::array<double, 2>> RecordTrial(AlgorithmTrials::Trial* trial,
                                                   double elapsed_us) {
    return trials_.Record(trial, elapsed_us);
  }
  AlgorithmTrials::Verdict ConcludeTrial(AlgorithmTrials::Trial* trial,
                                         const std::array<double, 2>& summed_us) {
    return trials_.Conclude(trial, summed_us);
  }
  const LinkModel& link() const { return link_; }
  const AlgorithmPolicy& policy() const { return policy_; }
  int nranks() const { return nranks_; }

 private:
  struct Choice {
    bool valid = false;
    size_t count = 0;
    DataType type = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
    const Algorithm* algorithm = nullptr;
    AlgorithmTrials::Trial* trial = nullptr;  // while these arguments are on trial
  };
  const int nranks_;
  const AlgorithmPolicy policy_;
  const LinkModel link_;
  AlgorithmTrials trials_;
  Choice last_[kNumCollectives];
};

}  // namespace braid::algorithms
