// Which algorithm runs a collective: BRAID_ALGO's constraints first, then the cheapest under the
// cost model.
//
// BRAID_ALGO follows NCCL_ALGO's list syntax, extended per collective:
//   "ring"                         only ring, wherever a collective has one
//   "allreduce:tree;broadcast:ring" per collective
//   "^tree" / "allreduce:^ring"    exclude
// Names are case-insensitive; an unknown collective or algorithm name is an InvalidArgument
// naming it. A collective not mentioned is unconstrained.
#pragma once

#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "core/status.h"

namespace braid::algorithms {

class AlgorithmPolicy {
 public:
  // "" means no constraint.
  static Result<AlgorithmPolicy> Parse(const std::string& spec);
  bool Allows(Collective kind, const char* algorithm) const;
  const std::string& spec() const { return spec_; }

 private:
  struct Rule {
    bool all_collectives = true;
    Collective kind = Collective::kAllReduce;
    bool exclude = false;
    std::vector<std::string> names;
  };
  std::string spec_;
  std::vector<Rule> rules_;
};

// The allowed algorithm for `args` with the lowest predicted time on `nranks` ranks.
// InvalidArgument, naming the collective and BRAID_ALGO, if the policy allows none.
Result<const Algorithm*> SelectAlgorithm(const CollectiveArgs& args, int nranks,
                                         const AlgorithmPolicy& policy, const LinkModel& link);

}  // namespace braid::algorithms
