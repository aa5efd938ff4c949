#include "core/device_path/staged_op.h"

#include <utility>

namespace braid::device_path {

using algorithms::Collective;
using algorithms::CollectiveArgs;

StagedOp StageCollective(const CollectiveArgs& args, int rank, int size, HostCollective run) {
  const size_t block = args.count * DataTypeSize(args.type);
  const size_t n = static_cast<size_t>(size);
  const size_t mine = static_cast<size_t>(rank) * block;  // this rank's block in an n-block buffer
  const bool root = rank == args.root;
  void* send = const_cast<void*>(args.sendbuf);
  StagedOp op;
  op.what = std::string(algorithms::CollectiveName(args.kind)) + " of " + std::to_string(args.count) + " " +
            DataTypeName(args.type);
  // Where the host collective's buffers sit in staging; -1: NULL (a buffer this rank does not use).
  long send_at = 0, recv_at = 0;
  switch (args.kind) {
    case Collective::kAllReduce:
      op.staging_bytes = block;
      op.copy_out = {{send, 0, block}};
      op.copy_in = {{args.recvbuf, 0, block}};
      break;
    case Collective::kBroadcast:
      op.staging_bytes = block;
      if (root) op.copy_out = {{send, 0, block}};
      op.copy_in = {{args.recvbuf, 0, block}};
      send_at = root ? 0 : -1;
      break;
    case Collective::kReduce:
      op.staging_bytes = block;
      op.copy_out = {{send, 0, block}};
      if (root) op.copy_in = {{args.recvbuf, 0, block}};
      recv_at = root ? 0 : -1;
      break;
    case Collective::kAllGather:
      op.staging_bytes = n * block;
      op.copy_out = {{send, mine, block}};
      op.copy_in = {{args.recvbuf, 0, n * block}};
      send_at = static_cast<long>(mine);
      break;
    case Collective::kReduceScatter:
      op.staging_bytes = n * block;
      op.copy_out = {{send, 0, n * block}};
      op.copy_in = {{args.recvbuf, mine, block}};
      recv_at = static_cast<long>(mine);
      break;
    case Collective::kAllToAll:
      op.staging_bytes = n * block;
      op.copy_out = {{send, 0, n * block}};
      op.copy_in = {{args.recvbuf, 0, n * block}};
      break;
    case Collective::kGather:
      op.staging_bytes = n * block;
      op.copy_out = {{send, mine, block}};
      if (root) op.copy_in = {{args.recvbuf, 0, n * block}};
      send_at = static_cast<long>(mine);
      recv_at = root ? 0 : -1;
      break;
    case Collective::kScatter:
      op.staging_bytes = n * block;
      if (root) op.copy_out = {{send, 0, n * block}};
      op.copy_in = {{args.recvbuf, mine, block}};
      send_at = root ? 0 : -1;
      recv_at = static_cast<long>(mine);
      break;
    case Collective::kBarrier:
      op.what = "barrier";
      break;
  }
  op.run_on_host = [args, send_at, recv_at, run = std::move(run)](char* staging) {
    CollectiveArgs host = args;
    host.sendbuf = send_at < 0 || staging == nullptr ? nullptr : staging + send_at;
    host.recvbuf = recv_at < 0 || staging == nullptr ? nullptr : staging + recv_at;
    return run(host);
  };
  return op;
}

StagedOp StageTransfers(const std::vector<Transfer>& transfers, HostTransfers run) {
  StagedOp op;
  std::vector<size_t> offsets;
  size_t sends = 0, receives = 0;
  for (const Transfer& t : transfers) {
    offsets.push_back(op.staging_bytes);
    if (t.is_send) {
      ++sends;
      op.copy_out.push_back({const_cast<void*>(t.sendbuf), op.staging_bytes, t.bytes});
    } else {
      ++receives;
      op.copy_in.push_back({t.recvbuf, op.staging_bytes, t.bytes});
    }
    op.staging_bytes += (t.bytes + 63) / 64 * 64;  // each slot on its own cache lines
  }
  op.what = std::to_string(sends) + " send(s) and " + std::to_string(receives) + " receive(s)";
  op.run_on_host = [transfers, offsets, run = std::move(run)](char* staging) {
    std::vector<Transfer> host = transfers;
    for (size_t i = 0; i < host.size(); ++i) {
      char* slot = staging == nullptr ? nullptr : staging + offsets[i];
      if (host[i].is_send) {
        host[i].sendbuf = slot;
      } else {
        host[i].recvbuf = slot;
      }
    }
    return run(host);
  };
  return op;
}

}  // namespace braid::device_path
