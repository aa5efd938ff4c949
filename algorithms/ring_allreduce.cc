// Ring allreduce.
//
// Why a ring: every rank sends and receives 2(n-1)/n of the buffer, the least any allreduce can
// move per rank, and every link carries traffic at every step, so large buffers run at link
// bandwidth whatever the rank count. (Small buffers pay 2(n-1) latencies; the collectives issue
// adds trees and recursive doubling for those.)
//
// Shape: the buffer is cut into n segments, one per rank. A reduce-scatter pass of n-1 steps
// leaves rank r owning the full reduction of segment r+1; an allgather pass of n-1 steps
// circulates the owned segments. Each segment is further cut into chunks of ctx.chunk_bytes, and
// the 2(n-1) steps run chunk slice by chunk slice, so a rank forwards slice c while slice c+1 is
// still arriving: pipelining bounds scratch memory and overlaps reduction with the wire.
//
// Messages from prev arrive in one numbered stream (message j = slice j / steps, step j % steps),
// matched against the same numbering on the sender, so both sides skip empty chunks alike. Up to
// kRecvWindow receives are posted ahead so data can land while the previous chunk is reduced.
// Message j+1 is sent right after message j is processed because it forwards what j produced.
//
// Why it is safe to receive allgather data straight into recvbuf while earlier sends from the same
// region may be queued: the final value of a segment can only reach us after the next rank
// received our partial for it, i.e. after our send of that region completed.
#include "algorithms/ring_allreduce.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

#include "kernels/cpu/reduce.h"

namespace braid::algorithms {
namespace {

constexpr size_t kRecvWindow = 4;

struct RingSchedule {
  int rank;
  int size;
  size_t count;
  size_t chunk_elems;
  size_t steps;  // 2(n-1) per slice

  size_t SegmentOffset(int seg) const {
    size_t base = count / size, extra = count % size;
    return seg * base + std::min<size_t>(seg, extra);
  }
  size_t SegmentCount(int seg) const {
    size_t base = count / size, extra = count % size;
    return base + (static_cast<size_t>(seg) < extra ? 1 : 0);
  }
  int Mod(int x) const { return ((x % size) + size) % size; }
  bool IsReduceStep(size_t step) const { return step < static_cast<size_t>(size - 1); }
  // Segment this rank sends at `step`; the next rank receives the same segment at that step.
  int SendSegment(size_t step) const {
    int s = static_cast<int>(step);
    return IsReduceStep(step) ? Mod(rank - s) : Mod(rank + 1 - (s - (size - 1)));
  }
  int RecvSegment(size_t step) const {
    int s = static_cast<int>(step);
    return IsReduceStep(step) ? Mod(rank - s - 1) : Mod(rank - (s - (size - 1)));
  }
  // Element range [offset, offset+len) of segment `seg` in slice `slice`; len may be 0.
  void Chunk(int seg, size_t slice, size_t* offset, size_t* len) const {
    size_t seg_count = SegmentCount(seg);
    size_t begin = std::min(seg_count, slice * chunk_elems);
    size_t end = std::min(seg_count, begin + chunk_elems);
    *offset = SegmentOffset(seg) + begin;
    *len = end - begin;
  }
};

std::string Describe(const CollectiveContext& ctx, size_t count, DataType type, ReduceOp op) {
  return "rank " + std::to_string(ctx.rank) + ": allreduce #" + std::to_string(ctx.sequence) +
         " (" + std::to_string(count) + " x " + DataTypeName(type) + ", " + ReduceOpName(op) +
         ", ring)";
}

}  // namespace

Status RingAllReduce(const CollectiveContext& ctx, const void* sendbuf, void* recvbuf,
                     size_t count, DataType type, ReduceOp op) {
  const size_t elem = DataTypeSize(type);
  if (count == 0) return Status::Ok();
  if (ctx.size == 1) {
    if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * elem);
    return Status::Ok();  // an average over one rank is the value itself
  }

  const int n = ctx.size;
  const int next_rank = (ctx.rank + 1) % n;
  const int prev_rank = (ctx.rank - 1 + n) % n;
  BRAID_ASSIGN_OR_RETURN(transport::Connection * next, ctx.connection(next_rank));
  BRAID_ASSIGN_OR_RETURN(transport::Connection * prev, ctx.connection(prev_rank));

  RingSchedule ring{ctx.rank, n, count, std::max<size_t>(1, ctx.chunk_bytes / elem),
                    static_cast<size_t>(2 * (n - 1))};
  const size_t largest_segment = ring.SegmentCount(0);
  const size_t slices = (largest_segment + ring.chunk_elems - 1) / ring.chunk_elems;
  const size_t messages = slices * ring.steps;
  const size_t slot_bytes = ring.chunk_elems * elem;
  char* scratch = static_cast<char*>(ctx.scratch(kRecvWindow * slot_bytes));

  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  transport::RequestPtr recvs[kRecvWindow];
  std::deque<transport::RequestPtr> sends;

  auto post_recv = [&](size_t j) {
    size_t step = j % ring.steps, offset, len;
    ring.Chunk(ring.RecvSegment(step), j / ring.steps, &offset, &len);
    recvs[j % kRecvWindow] = nullptr;
    if (len == 0) return;
    void* target = ring.IsReduceStep(step) ? scratch + (j % kRecvWindow) * slot_bytes
                                           : out + offset * elem;
    recvs[j % kRecvWindow] = prev->PostRecv(target, len * elem, MessageTag(ctx.sequence, j));
  };
  auto post_send = [&](size_t j) {
    size_t step = j % ring.steps, offset, len;
    ring.Chunk(ring.SendSegment(step), j / ring.steps, &offset, &len);
    if (len == 0) return;
    // Step 0 sends this rank's own contribution; later steps forward what was just produced.
    const char* source = (step == 0 ? in : out) + offset * elem;
    sends.push_back(next->PostSend(source, len * elem, MessageTag(ctx.sequence, j)));
    while (!sends.empty() && sends.front()->Test() && sends.front()->status().ok()) {
      sends.pop_front();  // reap finished sends so the queue stays short on long buffers
    }
  };
  auto fail = [&](const Status& status, const std::string& what, int peer) {
    return status.WithContext(Describe(ctx, count, type, op) + ": " + what + " rank " +
                              std::to_string(peer));
  };

  for (size_t j = 0; j < std::min(kRecvWindow, messages); ++j) post_recv(j);
  post_send(0);
  for (size_t j = 0; j < messages; ++j) {
    size_t step = j % ring.steps;
    transport::RequestPtr& recv = recvs[j % kRecvWindow];
    if (recv) {
      Status status = recv->Wait(ctx.deadline);
      if (!status.ok()) return fail(status, "receiving from", prev_rank);
      if (ring.IsReduceStep(step)) {
        size_t offset, len;
        ring.Chunk(ring.RecvSegment(step), j / ring.steps, &offset, &len);
        char* target = out + offset * elem;
        kernels::ReduceInto(type, op, target, in + offset * elem,
                            scratch + (j % kRecvWindow) * slot_bytes, len);
        if (op == ReduceOp::kAvg && step == ring.steps / 2 - 1) {
          kernels::DivideInPlace(type, target, len, n);  // this rank's segment is now final
        }
      }
    }
    if (j + kRecvWindow < messages) post_recv(j + kRecvWindow);
    if (j + 1 < messages) post_send(j + 1);
  }
  for (const transport::RequestPtr& send : sends) {
    Status status = send->Wait(ctx.deadline);
    if (!status.ok()) return fail(status, "sending to", next_rank);
  }
  return Status::Ok();
}

}  // namespace braid::algorithms
