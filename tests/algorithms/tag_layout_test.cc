// The tag layout (algorithms/tag_layout.h) at run time: the header's static_asserts prove the
// spaces disjoint for the values the compiler sees; this sweeps the edges of every field (sequence
// 0 and max, index 0 and max, past-the-width values that must wrap inside their space) through
// the same functions the communicator and the algorithms call, and checks that no two spaces
// share a tag. Before the layout, BRAID_CHECK's tags of collective #0 were point-to-point's first
// tags; the last case pins that down.
#include "algorithms/tag_layout.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace braid::algorithms {
namespace {

constexpr TagSpace kNumbered[] = {TagSpace::kCollective, TagSpace::kTrial, TagSpace::kCheck};

// Values the optimizer cannot fold, so the functions run as the communicator runs them.
uint64_t Opaque(uint64_t value) {
  volatile uint64_t v = value;
  return v;
}

const std::vector<uint64_t>& EdgeSequences() {
  static const std::vector<uint64_t> values = {
      0, 1, kTagSequenceMask - 1, kTagSequenceMask, kTagSequenceMask + 1, uint64_t{1} << 38,
      uint64_t{1} << 39, ~uint64_t{0}};
  return values;
}

const std::vector<uint64_t>& EdgeIndices() {
  static const std::vector<uint64_t> values = {
      0, 1, kTagIndexMask - 1, kTagIndexMask, kTagIndexMask + 1, ~uint64_t{0}};
  return values;
}

const std::vector<uint64_t>& EdgeCounts() {
  static const std::vector<uint64_t> values = {
      0, 1, uint64_t{1} << 24, kTagPointToPointCountMask, kTagPointToPointCountMask + 1,
      ~uint64_t{0}};
  return values;
}

TEST_CASE("tag layout: every tag stays in its space at the edges of every field", "[tags]") {
  for (TagSpace space : kNumbered) {
    for (uint64_t sequence : EdgeSequences()) {
      for (uint64_t index : EdgeIndices()) {
        INFO("space " << static_cast<int>(space) << " sequence " << sequence << " index "
                      << index);
        const uint64_t tag = MessageTag(OperationSequence(space, Opaque(sequence)), Opaque(index));
        CHECK(SpaceOf(tag) == space);
      }
    }
  }
  for (uint64_t count : EdgeCounts()) {
    INFO("count " << count);
    CHECK(SpaceOf(PointToPointTag(Opaque(count))) == TagSpace::kPointToPoint);
  }
}

TEST_CASE("tag layout: no two spaces share a tag", "[tags]") {
  std::map<uint64_t, TagSpace> owner;
  auto claim = [&](uint64_t tag, TagSpace space) {
    auto [it, inserted] = owner.emplace(tag, space);
    if (!inserted && it->second != space) {
      FAIL("tag 0x" << std::hex << tag << " is in space " << static_cast<int>(it->second)
                    << " and space " << static_cast<int>(space));
    }
  };
  for (TagSpace space : kNumbered) {
    for (uint64_t sequence : EdgeSequences()) {
      for (uint64_t index : EdgeIndices()) {
        claim(MessageTag(OperationSequence(space, Opaque(sequence)), Opaque(index)), space);
      }
    }
  }
  for (uint64_t count : EdgeCounts()) {
    claim(PointToPointTag(Opaque(count)), TagSpace::kPointToPoint);
  }
  // Past-the-width values wrap onto ones inside it, so each space holds its distinct in-width
  // edges: 4 sequences x 4 indices for each numbered space, 4 counts for point-to-point.
  CHECK(owner.size() == 3 * 4 * 4 + 4);
}

TEST_CASE("tag layout: fields wrap inside their space and keep distinct values apart", "[tags]") {
  for (TagSpace space : kNumbered) {
    INFO("space " << static_cast<int>(space));
    // Past the width, a field wraps to the start of its own space, not into the next space.
    CHECK(OperationSequence(space, Opaque(kTagSequenceMask + 1)) == OperationSequence(space, 0));
    CHECK(MessageTag(OperationSequence(space, 3), Opaque(kTagIndexMask + 1)) ==
          MessageTag(OperationSequence(space, 3), 0));
    // Within the width, neighbours differ.
    std::set<uint64_t> tags;
    for (uint64_t sequence : {uint64_t{0}, uint64_t{1}, kTagSequenceMask}) {
      for (uint64_t index : {uint64_t{0}, uint64_t{1}, kTagIndexMask}) {
        tags.insert(MessageTag(OperationSequence(space, Opaque(sequence)), Opaque(index)));
      }
    }
    CHECK(tags.size() == 9);
  }
  CHECK(PointToPointTag(Opaque(kTagPointToPointCountMask + 1)) == PointToPointTag(0));
  CHECK(PointToPointTag(0) != PointToPointTag(1));
}

TEST_CASE("tag layout: collective tags are the plain (sequence << 24 | index)", "[tags]") {
  // Algorithms and their tests read tags as "sequence, then index"; the collective space keeps
  // that for every sequence inside the width.
  for (uint64_t sequence : {uint64_t{0}, uint64_t{7}, kTagSequenceMask}) {
    for (uint64_t index : {uint64_t{0}, uint64_t{5}, kTagIndexMask}) {
      CHECK(MessageTag(OperationSequence(TagSpace::kCollective, Opaque(sequence)),
                       Opaque(index)) == ((sequence << 24) | index));
    }
  }
}

TEST_CASE("tag layout: BRAID_CHECK's tags of collective #0 are not point-to-point's first tags",
          "[tags]") {
  // The overlap the layout removed: check tags were (sequence | 1 << 39) << 24, the same bit 63
  // that point-to-point's counter sat under.
  for (uint64_t index = 0; index < 4; ++index) {
    for (uint64_t count = 0; count < 4; ++count) {
      CHECK(MessageTag(OperationSequence(TagSpace::kCheck, 0), Opaque(index)) !=
            PointToPointTag(Opaque(count)));
      CHECK(MessageTag(OperationSequence(TagSpace::kTrial, 0), Opaque(index)) !=
            PointToPointTag(Opaque(count)));
    }
  }
}

}  // namespace
}  // namespace braid::algorithms
