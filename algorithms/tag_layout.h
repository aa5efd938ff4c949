// The one layout of message tags. Every message a communicator sends carries a 64-bit tag, and a
// receive completes only with a message of the tag it expects (transport/connection.h), so a tag
// is what keeps two operations' messages apart on a shared connection. Tags are built here and
// nowhere else, and the static_asserts below prove that the spaces cannot overlap.
//
//   bit  63 62 | 61 ................. 24 | 23 ............ 0
//        space | sequence (mod 2^38)     | index (mod 2^24)    collective, trial, check
//        space | message count of the pair (mod 2^62)          point-to-point
//
// Spaces:
//   kCollective    message `index` of collective #sequence (what every algorithm sends).
//   kTrial         the sum that settles an algorithm trial, run after collective #sequence.
//   kCheck         BRAID_CHECK's exchange of call arguments, run before collective #sequence.
//   kPointToPoint  braidSend/braidRecv: the n-th message between an ordered pair of ranks; only
//                  the two ranks take part, so it is counted apart from the collectives.
// A trial's sum and a check's exchange are collectives themselves (they run a registered
// algorithm over the same connections), so each has a space of its own: their messages can never
// match the collective's whatever the schedule.
//
// Why the sequence and the index wrap: tags only guard against ranks disagreeing about the
// schedule (a mismatch fails the receive instead of mixing data). Two operations 2^38 apart, or
// two messages of one operation 2^24 apart, are never in flight at the same time on one
// connection, so wrapping inside a space is harmless; wrapping into another space is not, which
// is why every field is masked to its width.
//
// Cost: an algorithm's message tag is one shift and one OR of an operation sequence computed once
// per operation (OperationSequence); nothing here adds work per message.
#pragma once

#include <cstdint>

namespace braid::algorithms {

enum class TagSpace : uint64_t {
  kCollective = 0,
  kTrial = 1,
  kCheck = 2,
  kPointToPoint = 3,
};

constexpr int kTagIndexBits = 24;
constexpr int kTagSpaceBits = 2;
constexpr int kTagSequenceBits = 64 - kTagSpaceBits - kTagIndexBits;  // 38
constexpr int kTagSpaceShift = 64 - kTagSpaceBits;                    // 62

constexpr uint64_t kTagIndexMask = (uint64_t{1} << kTagIndexBits) - 1;
constexpr uint64_t kTagSequenceMask = (uint64_t{1} << kTagSequenceBits) - 1;
constexpr uint64_t kTagPointToPointCountMask = (uint64_t{1} << kTagSpaceShift) - 1;
constexpr uint64_t kTagSpaceMask = ~kTagPointToPointCountMask;

// The fields tile the 64 bits exactly: no bit is in two fields, none is in none.
static_assert((kTagSpaceMask & (kTagSequenceMask << kTagIndexBits)) == 0, "space vs sequence");
static_assert(((kTagSequenceMask << kTagIndexBits) & kTagIndexMask) == 0, "sequence vs index");
static_assert((kTagSpaceMask | (kTagSequenceMask << kTagIndexBits) | kTagIndexMask) == ~uint64_t{0},
              "the collective-shaped fields cover every bit");
static_assert((kTagSpaceMask | kTagPointToPointCountMask) == ~uint64_t{0} &&
                  (kTagSpaceMask & kTagPointToPointCountMask) == 0,
              "the point-to-point fields cover every bit once");

// What an operation of `space` numbered `sequence` carries as CollectiveContext::sequence: the
// sequence modulo 2^38 with the space above it, so that MessageTag puts the space in bits 62-63.
// Computed once per operation. Pure; for kCollective, kTrial and kCheck (point-to-point messages
// are numbered per pair instead, PointToPointTag).
constexpr uint64_t OperationSequence(TagSpace space, uint64_t sequence) {
  return (static_cast<uint64_t>(space) << kTagSequenceBits) | (sequence & kTagSequenceMask);
}

// Tag of message `index` of the operation whose CollectiveContext::sequence is
// `operation_sequence` (made by OperationSequence). Pure; what every algorithm calls per message,
// so it stays one shift and one OR.
constexpr uint64_t MessageTag(uint64_t operation_sequence, uint64_t index) {
  return (operation_sequence << kTagIndexBits) | (index & kTagIndexMask);
}

// Tag of the `count`-th point-to-point message from one rank to another (counted per ordered
// pair, on both sides). Pure.
constexpr uint64_t PointToPointTag(uint64_t count) {
  return (static_cast<uint64_t>(TagSpace::kPointToPoint) << kTagSpaceShift) |
         (count & kTagPointToPointCountMask);
}

// The space a tag made by the functions above belongs to. Pure; for tests and diagnostics.
constexpr TagSpace SpaceOf(uint64_t tag) { return static_cast<TagSpace>(tag >> kTagSpaceShift); }

// Every space keeps its tags, at the edges of every field: a tag never lands in another space.
namespace tag_layout_internal {
constexpr bool StaysIn(TagSpace space) {
  return SpaceOf(MessageTag(OperationSequence(space, 0), 0)) == space &&
         SpaceOf(MessageTag(OperationSequence(space, 0), ~uint64_t{0})) == space &&
         SpaceOf(MessageTag(OperationSequence(space, ~uint64_t{0}), 0)) == space &&
         SpaceOf(MessageTag(OperationSequence(space, ~uint64_t{0}), ~uint64_t{0})) == space;
}
}  // namespace tag_layout_internal
static_assert(tag_layout_internal::StaysIn(TagSpace::kCollective), "collective tags stay");
static_assert(tag_layout_internal::StaysIn(TagSpace::kTrial), "trial tags stay");
static_assert(tag_layout_internal::StaysIn(TagSpace::kCheck), "check tags stay");
static_assert(SpaceOf(PointToPointTag(0)) == TagSpace::kPointToPoint &&
                  SpaceOf(PointToPointTag(~uint64_t{0})) == TagSpace::kPointToPoint,
              "point-to-point tags stay");
// The collective space is the all-zero top: a collective's tags are what they were before the
// spaces existed, for every sequence below 2^38.
static_assert(MessageTag(OperationSequence(TagSpace::kCollective, 5), 7) ==
                  ((uint64_t{5} << 24) | 7),
              "collective tags unchanged");

}  // namespace braid::algorithms
