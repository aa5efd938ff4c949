#include "bench/perf_collective.h"

#include <algorithm>
#include <cstring>

#include "bench/perf_types.h"

namespace braid::bench {

void BufferBytes(const CollSizes& s, size_t elem, int rank, size_t* send_bytes,
                 size_t* recv_bytes) {
  const size_t r = static_cast<size_t>(rank);
  *send_bytes = s.send_count * elem;
  *recv_bytes = std::max({s.recv_count * elem, (s.recv_inplace_offset * r + s.recv_count) * elem,
                          (s.send_inplace_offset * r + s.send_count) * elem});
}

RankBuffers PrepareRank(const Collective& collective, const CollSizes& s, braidDataType_t type,
                        braidRedOp_t op, int root, int rank, int nranks, uint64_t seed,
                        bool in_place, char* send, char* recv, void* expected) {
  const size_t elem = TypeSize(type);
  const size_t r = static_cast<size_t>(rank);
  RankBuffers b{send, recv};
  if (in_place) {
    b.send = recv + s.send_inplace_offset * r * elem;
    b.recv = recv + s.recv_inplace_offset * r * elem;
  }
  size_t send_bytes, recv_bytes;
  BufferBytes(s, elem, rank, &send_bytes, &recv_bytes);
  // Poison all of recv the row can touch: a collective that writes nothing cannot pass, and
  // stale data from the previous row cannot pass for this one's.
  std::memset(recv, 0xA5, in_place ? recv_bytes : s.recv_count * elem);
  DataArgs args{type, op, root, rank, nranks, seed, &s, b.send, b.recv, expected};
  collective.InitData(args);
  return b;
}

}  // namespace braid::bench
