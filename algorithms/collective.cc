#include "algorithms/collective.h"

#include <strings.h>

#include <cstring>

namespace braid::algorithms {
namespace {

constexpr const char* kNames[kNumCollectives] = {
    "allreduce", "broadcast", "reduce", "allgather", "reducescatter",
    "alltoall",  "gather",    "scatter", "barrier"};

}  // namespace

const char* CollectiveName(Collective kind) {
  int i = static_cast<int>(kind);
  return i >= 0 && i < kNumCollectives ? kNames[i] : "invalid";
}

bool ParseCollective(const char* name, Collective* out) {
  for (int i = 0; i < kNumCollectives; ++i) {
    if (strcasecmp(name, kNames[i]) == 0) {
      *out = static_cast<Collective>(i);
      return true;
    }
  }
  return false;
}

}  // namespace braid::algorithms
