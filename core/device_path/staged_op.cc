#include "core/device_path/staged_op.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace braid::device_path {

using algorithms::Collective;
using algorithms::CollectiveArgs;

namespace {

// Appends a copy, merged with the previous one where both sides continue it.
void AddCopy(std::vector<StagedCopy>& copies, void* device, size_t offset, size_t bytes) {
  if (bytes == 0) return;
  if (!copies.empty()) {
    StagedCopy& last = copies.back();
    if (static_cast<char*>(last.device) + last.bytes == device && last.offset + last.bytes == offset) {
      last.bytes += bytes;
      return;
    }
  }
  copies.push_back({device, offset, bytes});
}

// The step over elements [a, a + m) of every block: its copies and where the host collective's
// buffers sit in its slot.
StagedStep StageStep(const CollectiveArgs& args, int rank, int size, size_t a, size_t m, HostCollective run) {
  const size_t e = DataTypeSize(args.type);
  const size_t n = static_cast<size_t>(size);
  const size_t slice = m * e;                                   // one block's share in the slot
  const size_t mine = static_cast<size_t>(rank) * slice;        // this rank's share in the slot
  const size_t block = args.count * e;                          // one block in the device buffer
  const bool root = rank == args.root;
  char* send = static_cast<char*>(const_cast<void*>(args.sendbuf));
  char* recv = static_cast<char*>(args.recvbuf);
  const size_t at = a * e;  // the step's start within a block
  // Block p's share, device side.
  auto in_block = [&](char* base, size_t p) { return base + p * block + at; };
  StagedStep step;
  // Where the host collective's buffers sit in the slot; -1: NULL (a buffer this rank does not use).
  long send_at = 0, recv_at = 0;
  switch (args.kind) {
    case Collective::kAllReduce:
      AddCopy(step.copy_out, send + at, 0, slice);
      AddCopy(step.copy_in, recv + at, 0, slice);
      break;
    case Collective::kBroadcast:
      if (root) AddCopy(step.copy_out, send + at, 0, slice);
      AddCopy(step.copy_in, recv + at, 0, slice);
      send_at = root ? 0 : -1;
      break;
    case Collective::kReduce:
      AddCopy(step.copy_out, send + at, 0, slice);
      if (root) AddCopy(step.copy_in, recv + at, 0, slice);
      recv_at = root ? 0 : -1;
      break;
    case Collective::kAllGather:
      AddCopy(step.copy_out, send + at, mine, slice);
      for (size_t p = 0; p < n; ++p) AddCopy(step.copy_in, in_block(recv, p), p * slice, slice);
      send_at = static_cast<long>(mine);
      break;
    case Collective::kReduceScatter:
      for (size_t p = 0; p < n; ++p) AddCopy(step.copy_out, in_block(send, p), p * slice, slice);
      AddCopy(step.copy_in, recv + at, mine, slice);
      recv_at = static_cast<long>(mine);
      break;
    case Collective::kAllToAll:
      for (size_t p = 0; p < n; ++p) AddCopy(step.copy_out, in_block(send, p), p * slice, slice);
      for (size_t p = 0; p < n; ++p) AddCopy(step.copy_in, in_block(recv, p), p * slice, slice);
      break;
    case Collective::kGather:
      AddCopy(step.copy_out, send + at, mine, slice);
      if (root) {
        for (size_t p = 0; p < n; ++p) AddCopy(step.copy_in, in_block(recv, p), p * slice, slice);
      }
      send_at = static_cast<long>(mine);
      recv_at = root ? 0 : -1;
      break;
    case Collective::kScatter:
      if (root) {
        for (size_t p = 0; p < n; ++p) AddCopy(step.copy_out, in_block(send, p), p * slice, slice);
      }
      AddCopy(step.copy_in, recv + at, mine, slice);
      send_at = root ? 0 : -1;
      recv_at = static_cast<long>(mine);
      break;
    case Collective::kBarrier:
      break;
  }
  CollectiveArgs host = args;
  host.count = m;
  step.run_on_host = [host, send_at, recv_at, run = std::move(run)](char* staging) {
    CollectiveArgs on_slot = host;
    on_slot.sendbuf = send_at < 0 || staging == nullptr ? nullptr : staging + send_at;
    on_slot.recvbuf = recv_at < 0 || staging == nullptr ? nullptr : staging + recv_at;
    return run(on_slot);
  };
  return step;
}

}  // namespace

StagedOp StageCollective(const CollectiveArgs& args, int rank, int size, size_t chunk_bytes, HostCollective run) {
  StagedOp op;
  op.what = std::string(algorithms::CollectiveName(args.kind)) + " of " + std::to_string(args.count) + " " +
            DataTypeName(args.type);
  if (args.kind == Collective::kBarrier) {
    op.what = "barrier";
    op.steps.push_back(StageStep(args, rank, size, 0, 0, std::move(run)));
    return op;
  }
  const size_t e = DataTypeSize(args.type);
  // One block (allreduce, broadcast, reduce) or n per-rank blocks (the others): what nccl-tests
  // counts as the message, over one block's bytes.
  const size_t blocks = args.count == 0 ? 1 : args.MessageBytes(size) / (args.count * e);
  // Elements of each block per step: as many as fit chunk_bytes of staging, at least one.
  size_t per_step = args.count;
  if (chunk_bytes > 0) per_step = std::max<size_t>(1, chunk_bytes / (blocks * e));
  if (per_step == 0 || per_step >= args.count) per_step = std::max<size_t>(args.count, 1);
  op.staging_bytes = blocks * std::min(per_step, args.count) * e;
  size_t a = 0;
  do {  // count 0: one empty step, as before the cut
    op.steps.push_back(StageStep(args, rank, size, a, std::min(per_step, args.count - a), run));
    a += per_step;
  } while (a < args.count);
  return op;
}

StagedOp StageTransfers(const std::vector<Transfer>& transfers, size_t chunk_bytes, HostTransfers run) {
  StagedOp op;
  size_t sends = 0, receives = 0, steps = 1;
  std::vector<size_t> pieces;  // of each transfer
  for (const Transfer& t : transfers) {
    (t.is_send ? sends : receives) += 1;
    const size_t p = chunk_bytes == 0 || t.bytes <= chunk_bytes ? 1 : (t.bytes + chunk_bytes - 1) / chunk_bytes;
    pieces.push_back(p);
    steps = std::max(steps, p);
  }
  op.what = std::to_string(sends) + " send(s) and " + std::to_string(receives) + " receive(s)";
  for (size_t j = 0; j < steps; ++j) {
    // Step j carries piece j of every transfer that has one, each in its own cache lines.
    struct Piece {
      Transfer host;       // the transfer's piece: its buffer set to the slot at run time
      size_t offset = 0;   // of the piece in the slot (its header first, where it has one)
      uint64_t total = 0;  // the transfer's bytes, in the header of a cut transfer's piece 0
      bool header = false;
    };
    std::vector<Piece> step_pieces;
    StagedStep step;
    size_t at = 0;
    for (size_t i = 0; i < transfers.size(); ++i) {
      if (j >= pieces[i]) continue;
      const Transfer& t = transfers[i];
      const size_t from = j * chunk_bytes;
      const size_t bytes = pieces[i] == 1 ? t.bytes : std::min(chunk_bytes, t.bytes - from);
      Piece piece{t, at, t.bytes, pieces[i] > 1 && j == 0};
      const size_t data_at = at + (piece.header ? kTransferHeaderBytes : 0);
      piece.host.bytes = bytes + (piece.header ? kTransferHeaderBytes : 0);
      if (t.is_send) {
        AddCopy(step.copy_out, static_cast<char*>(const_cast<void*>(t.sendbuf)) + from, data_at, bytes);
      } else {
        AddCopy(step.copy_in, static_cast<char*>(t.recvbuf) + from, data_at, bytes);
      }
      step_pieces.push_back(piece);
      at += (piece.host.bytes + 63) / 64 * 64;
    }
    op.staging_bytes = std::max(op.staging_bytes, at);
    step.run_on_host = [step_pieces = std::move(step_pieces), run](char* staging) -> Status {
      std::vector<Transfer> host;
      for (const Piece& piece : step_pieces) {
        Transfer t = piece.host;
        char* slot = staging == nullptr ? nullptr : staging + piece.offset;
        if (t.is_send) {
          t.sendbuf = slot;
        } else {
          t.recvbuf = slot;
        }
        if (piece.header && t.is_send) std::memcpy(slot, &piece.total, sizeof(piece.total));
        host.push_back(t);
      }
      BRAID_RETURN_IF_ERROR(run(host));
      for (const Piece& piece : step_pieces) {
        if (!piece.header || piece.host.is_send) continue;
        uint64_t sent = 0;
        std::memcpy(&sent, staging + piece.offset, sizeof(sent));
        if (sent != piece.total) {
          return Status::InvalidUsage("device receive of " + std::to_string(piece.total) + " bytes from rank " +
                                      std::to_string(piece.host.peer) + ", which sent " + std::to_string(sent) +
                                      " bytes: the counts (times the datatype's size) must match");
        }
      }
      return Status::Ok();
    };
    op.steps.push_back(std::move(step));
  }
  return op;
}

}  // namespace braid::device_path
