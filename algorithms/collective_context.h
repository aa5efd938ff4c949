// What an algorithm needs to run one collective: who it is, how to reach its neighbours, the
// deadline, and reusable scratch memory. Algorithms see Connections only, never a transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/function_ref.h"
#include "core/deadline.h"
#include "core/status.h"
#include "transport/connection.h"

namespace braid::algorithms {

struct CollectiveContext {
  int rank = 0;
  int size = 1;
  // Per-communicator sequence number of this collective; folded into every message tag so that
  // ranks disagreeing about the schedule fail with a tag mismatch instead of mixing data.
  uint64_t sequence = 0;
  // Bytes per pipelined chunk (BRAID_CHUNK_BYTES).
  size_t chunk_bytes = 512 * 1024;
  Deadline deadline = Deadline::Never();
  // Returns the connection to `peer`, establishing it on first use.
  FunctionRef<Result<transport::Connection*>(int peer)> connection;
  // Returns at least `bytes` of scratch memory owned by the communicator (valid until the next
  // call, never shared between concurrent collectives).
  FunctionRef<void*(size_t bytes)> scratch;
};

// Tag of message `index` of collective `sequence`. 40 bits of sequence, 24 of message index:
// wrapping after 16M messages is harmless because tags only guard against schedule mismatch.
inline uint64_t MessageTag(uint64_t sequence, uint64_t index) {
  return (sequence << 24) | (index & 0xFFFFFF);
}

}  // namespace braid::algorithms
