// One rank's CollectiveContext over a TransportMesh (transport_mesh.h): its links, scratch of
// its own, a deadline and 64-byte chunks, so an algorithm or the primitives run below the
// communicator with many slices through each window. A test sets what else it needs on `ctx`
// (sequence, topology). Not copyable: `ctx` points into it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/collective_context.h"
#include "core/base/deadline.h"
#include "core/base/status.h"
#include "tests/harness/transport_mesh.h"

namespace braid::testing {

struct MeshRankContext {
  MeshRankContext(TransportMesh& mesh, int rank, int64_t timeout_ms)
      : connect([&mesh, rank](int peer) -> Result<transport::Connection*> {
          return mesh.conns[rank][peer].get();
        }),
        scratch([this](size_t bytes) -> void* {
          if (memory.size() < bytes) memory.resize(bytes);
          return memory.data();
        }) {
    ctx.rank = rank;
    ctx.size = mesh.size();
    ctx.chunk_bytes = 64;  // 16 int32 per slice: every test runs many slices through the window
    ctx.deadline = Deadline::AfterMs(timeout_ms);
    ctx.connection.connect = connect;
    ctx.scratch = scratch;
  }
  MeshRankContext(const MeshRankContext&) = delete;
  MeshRankContext& operator=(const MeshRankContext&) = delete;

  std::function<Result<transport::Connection*>(int)> connect;
  std::function<void*(size_t)> scratch;
  std::vector<char> memory;
  algorithms::CollectiveContext ctx;
};

}  // namespace braid::testing
