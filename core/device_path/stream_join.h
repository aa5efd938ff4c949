// Several application streams in one group call on one communicator (NCCL's semantics): the
// group's device work runs after everything queued so far on every one of those streams, and
// every one of them waits for all of the group's work before its own later work.
//
// How: the first stream of the group is the primary, and the group's operations are enqueued on
// it as if it were the only one. Before them, each other stream records an event and the primary
// waits for it (Join); after them, the primary records an event and each other stream waits for
// it (Release). Both are stream-side waits: the calling thread never blocks, and no kernel spins.
// The events are reused from one group to the next (a stream's wait binds to the event's latest
// record before it), one pair per extra stream, so a steady pattern of groups allocates nothing.
//
// Thread safety: one thread at a time (the communicator's device mutex serialises it).
#pragma once

#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/device/device.h"

namespace braid::device_path {

class StreamJoin {
 public:
  explicit StreamJoin(device::Device* device) : device_(device) {}

  // streams[0] (the primary) waits for the work queued so far on streams[1..]. Native handles
  // (braidStream_t; null is the legacy default stream); at least one; no repeats.
  Status Join(const std::vector<void*>& streams);
  // streams[1..] wait for the work queued so far on streams[0]. After Join with the same list.
  Status Release(const std::vector<void*>& streams);

 private:
  // Makes sure there are `count` events of each kind.
  Status Reserve(size_t count);

  device::Device* const device_;
  std::vector<std::unique_ptr<device::Event>> joined_;    // joined_[i]: streams[i + 1] -> primary
  std::vector<std::unique_ptr<device::Event>> released_;  // released_[i]: primary -> streams[i + 1]
};

}  // namespace braid::device_path
