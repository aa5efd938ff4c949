// The C API: argument checks, handle lookup and error conversion over braid::Communicator and
// core/bootstrap.h. Nothing here knows about stores, transports or algorithms.
#include "bindings/c/braid.h"

#include <cstdint>
#include <cstdio>
#include <string>

#include "bindings/c/comm_handle.h"
#include "bindings/c/config_from_c.h"
#include "bindings/c/group.h"
#include "algorithms/collective.h"
#include "core/base/datatype.h"
#include "core/bootstrap.h"
#include "core/communicator.h"
#include "core/device_path/process_device.h"

using braid::Code;
using braid::Status;
using braid::capi::Guarded;

static_assert(static_cast<int>(Code::kAborted) == braidAborted, "codes follow braidResult_t");
static_assert(static_cast<int>(Code::kTimeout) == braidTimeout, "codes follow braidResult_t");
static_assert(static_cast<int>(braid::DataType::kBfloat16) == braidBfloat16, "types follow braid.h");
static_assert(static_cast<int>(braid::ReduceOp::kAvg) == braidAvg, "ops follow braid.h");
static_assert(braid::Communicator::kNoColor == BRAID_SPLIT_NOCOLOR, "split colors follow braid.h");
static_assert(sizeof(braidUniqueId) == braid::kUniqueIdBytes, "unique id size");

namespace {

// Every collective call runs the checks below. Why each is split into an inline test and a
// cold function that builds the message: the happy path then costs a few instructions, with no
// call and no Status built and destroyed per check (the checks were ~12% of the instructions of
// a 2-rank 8-byte allreduce), and overflow is tested with a multiplication instead of the
// divisions the old SIZE_MAX / elem form needed.
#define BRAID_COLD __attribute__((cold, noinline))

BRAID_COLD Status DataTypeError(braidDataType_t datatype) {
  return Status::InvalidArgument("datatype " + std::to_string(static_cast<int>(datatype)) +
                                 " is not a braidDataType_t (0.." +
                                 std::to_string(braid::kNumDataTypes - 1) + ")");
}

inline Status CheckDataType(braidDataType_t datatype) {
  if (!braid::IsValidDataType(static_cast<int>(datatype))) return DataTypeError(datatype);
  return Status::Ok();
}

BRAID_COLD Status OpError(braidRedOp_t op) {
  return Status::InvalidArgument("op " + std::to_string(static_cast<int>(op)) +
                                 " is not a braidRedOp_t (0.." +
                                 std::to_string(braid::kNumReduceOps - 1) + ")");
}

inline Status CheckOp(braidRedOp_t op) {
  if (!braid::IsValidReduceOp(static_cast<int>(op))) return OpError(op);
  return Status::Ok();
}

// Whether count * elem * multiple bytes overflows size_t (with count 0 it never does).
inline bool BytesOverflow(size_t count, size_t elem, size_t multiple) {
  size_t unit = 0, bytes = 0;
  return count != 0 &&
         (__builtin_mul_overflow(elem, multiple, &unit) || __builtin_mul_overflow(count, unit, &bytes));
}

BRAID_COLD Status OverflowError(size_t count, size_t multiple, braidDataType_t datatype) {
  return Status::InvalidArgument("count " + std::to_string(count) + " of " +
                                 braid::DataTypeName(static_cast<braid::DataType>(datatype)) +
                                 (multiple > 1 ? " times " + std::to_string(multiple) + " ranks" : "") +
                                 " overflows the addressable byte size");
}

BRAID_COLD Status NullBufferError(const char* name, size_t count) {
  return Status::InvalidArgument(std::string(name) + " is NULL with count " + std::to_string(count));
}

// count elements of datatype must fit in size_t bytes, and non-empty buffers must exist.
inline Status CheckBuffer(const void* buffer, const char* name, size_t count, braidDataType_t datatype) {
  if (BytesOverflow(count, braid::DataTypeSize(static_cast<braid::DataType>(datatype)), 1)) {
    return OverflowError(count, 1, datatype);
  }
  if (count > 0 && buffer == nullptr) return NullBufferError(name, count);
  return Status::Ok();
}

BRAID_COLD Status StreamError() {
  return Status::InvalidUsage(
      "stream is not NULL, but this process has no device (braid was built without CUDA: link "
      "braid_cuda for device buffers); pass stream=NULL for host buffers");
}

inline Status CheckHostStream(braidStream_t stream) {
  if (stream != nullptr) return StreamError();
  return Status::Ok();
}

// Where a call runs: host buffers on the calling thread (today's path), device buffers through
// the communicator's device path (core/device_path).
enum class Route { kHost, kDevice };

std::string Hex(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", ptr);
  return text;
}

// Which route a call with these buffers (the ones this rank uses; NULL entries are skipped) and
// this stream takes, or why it is refused: host and device buffers mixed (kInvalidArgument), a
// buffer the device cannot place (kInvalidArgument), a stream with host buffers or without a
// device (kInvalidUsage), a stream being captured into a graph (kInvalidUsage). Only reached when
// a stream is given or a device may exist, so a host-only process pays one flag for it.
BRAID_COLD braid::Result<Route> ChooseRoute(const void* const* buffers, const char* const* names, int n,
                                            braidStream_t stream) {
  if (!braid::device_path::DevicePossible()) {
    BRAID_RETURN_IF_ERROR(CheckHostStream(stream));
    return Route::kHost;
  }
  auto device = braid::device_path::ProcessDevice();
  if (!device.ok()) {
    if (stream == nullptr) return Route::kHost;  // no device here, so no device buffers either
    return Status::InvalidUsage("stream is not NULL, but this process has no usable device: " +
                                device.status().message() + "; pass stream=NULL for host buffers");
  }
  int host = -1, on_device = -1;  // the first buffer of each kind
  for (int i = 0; i < n; ++i) {
    if (buffers[i] == nullptr) continue;
    BRAID_ASSIGN_OR_RETURN(braid::device::PointerKind kind, device.value()->Classify(buffers[i]));
    switch (kind) {
      case braid::device::PointerKind::kHost:
        if (host < 0) host = i;
        break;
      case braid::device::PointerKind::kDevice:
        if (on_device < 0) on_device = i;
        break;
      case braid::device::PointerKind::kUnknown:
        return Status::InvalidArgument(std::string(names[i]) + " (" + Hex(buffers[i]) +
                                       ") is neither host memory nor memory of " +
                                       device.value()->Describe());
    }
  }
  if (host >= 0 && on_device >= 0) {
    return Status::InvalidArgument(std::string(names[on_device]) + " (" + Hex(buffers[on_device]) +
                                   ") is device memory but " + names[host] + " (" + Hex(buffers[host]) +
                                   ") is host memory: one call takes host buffers or device buffers, not both");
  }
  if (on_device < 0) {
    if (stream == nullptr) return Route::kHost;
    // A barrier names no buffer: with a stream it is ordered on that stream.
    if (host >= 0) {
      return Status::InvalidUsage("stream is not NULL, but the buffers are host memory (" + std::string(names[host]) +
                                  " " + Hex(buffers[host]) +
                                  "); pass stream=NULL for host buffers, or device buffers with a stream");
    }
  }
  auto capturing = device.value()->IsCapturing(stream);
  if (!capturing.ok()) return capturing.status().WithContext("stream");
  if (capturing.value()) {
    return Status::InvalidUsage("the stream is being captured into a CUDA graph: capture is not supported yet "
                                "(braid would be recorded into a graph it cannot replay); call outside the "
                                "capture");
  }
  return Route::kDevice;
}

// Gives a communicator made by core/bootstrap.h a live handle.
Status MakeComm(braidComm_t* out, braid::Result<std::unique_ptr<braid::Communicator>> created) {
  if (!created.ok()) return created.status();
  auto* handle = new braidComm();
  handle->impl = std::move(created).value();
  braid::capi::RegisterComm(handle);
  *out = handle;
  return Status::Ok();
}

}  // namespace

extern "C" {

braidResult_t braidGetVersion(int* version) {
  return Guarded(nullptr, [&] {
    if (version == nullptr) return Status::InvalidArgument("version is NULL");
    *version = BRAID_VERSION_CODE;
    return Status::Ok();
  });
}

const char* braidGetErrorString(braidResult_t result) {
  switch (result) {
    case braidSuccess: return "no error";
    case braidUnhandledCudaError: return "unhandled cuda error (run with BRAID_DEBUG=INFO for details)";
    case braidSystemError: return "unhandled system error (run with BRAID_DEBUG=INFO for details)";
    case braidInternalError: return "internal error - please report this issue to the braid developers";
    case braidInvalidArgument: return "invalid argument (run with BRAID_DEBUG=WARN for details)";
    case braidInvalidUsage: return "invalid usage (run with BRAID_DEBUG=WARN for details)";
    case braidRemoteError: return "remote process exited or there was a network error";
    case braidInProgress: return "braid operation in progress";
    case braidTimeout: return "operation timed out (BRAID_TIMEOUT_MS)";
    case braidAborted: return "communicator was aborted";
    default: return "unknown result code";
  }
}

const char* braidGetLastError(braidComm_t comm) { return braid::capi::CommLastError(comm); }

braidResult_t braidGetUniqueId(braidUniqueId* uniqueId) {
  return Guarded(nullptr, [&]() -> Status {
    if (uniqueId == nullptr) return Status::InvalidArgument("uniqueId is NULL");
    braid::Config config;
    BRAID_ASSIGN_OR_RETURN(config, braid::capi::ConfigFromC(nullptr));
    return braid::NewUniqueId(config, uniqueId->internal);
  });
}

braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId commId,
                                      int rank, braidConfig_t* config) {
  return Guarded(nullptr, [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("comm (the output pointer) is NULL");
    *comm = nullptr;
    BRAID_RETURN_IF_ERROR(braid::CheckMembership(nranks, rank));
    braid::Config settings;
    BRAID_ASSIGN_OR_RETURN(settings, braid::capi::ConfigFromC(config));
    return MakeComm(comm, braid::CreateFromUniqueId(commId.internal, nranks, rank,
                                                    std::move(settings)));
  });
}

braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank) {
  return braidCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

braidResult_t braidCommInitEnv(braidComm_t* comm, braidConfig_t* config) {
  return Guarded(nullptr, [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("comm (the output pointer) is NULL");
    *comm = nullptr;
    braid::Config settings;
    BRAID_ASSIGN_OR_RETURN(settings, braid::capi::ConfigFromC(config));
    return MakeComm(comm, braid::CreateFromEnvironment(std::move(settings)));
  });
}

braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm,
                             braidConfig_t* config) {
  return Guarded(comm, [&]() -> Status {
    if (newcomm == nullptr) return Status::InvalidArgument("newcomm is NULL");
    *newcomm = nullptr;
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    if (braid::capi::InGroup()) {
      return Status::InvalidUsage("braidCommSplit inside braidGroupStart/braidGroupEnd is not supported");
    }
    braid::Config child_config;
    if (config == nullptr) {
      child_config = comm->impl->config();  // NCCL: a NULL config inherits the parent's
    } else {
      BRAID_ASSIGN_OR_RETURN(child_config, braid::capi::ConfigFromC(config));
    }
    std::unique_ptr<braid::Communicator> child;
    BRAID_ASSIGN_OR_RETURN(child, comm->impl->Split(color, key, std::move(child_config)));
    if (!child) return Status::Ok();  // BRAID_SPLIT_NOCOLOR
    auto* handle = new braidComm();
    handle->impl = std::move(child);
    braid::capi::RegisterComm(handle);
    *newcomm = handle;
    return Status::Ok();
  });
}

braidResult_t braidCommFinalize(braidComm_t comm) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    return comm->impl->Finalize();
  });
}

braidResult_t braidCommDestroy(braidComm_t comm) {
  return Guarded(nullptr, [&]() -> Status {
    if (comm == nullptr) return Status::InvalidArgument("comm is NULL");
    if (!braid::capi::UnregisterComm(comm)) {
      return Status::InvalidUsage("comm does not refer to a live communicator (destroyed twice, or "
                                  "never initialized)");
    }
    delete comm;
    return Status::Ok();
  });
}

braidResult_t braidCommAbort(braidComm_t comm) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    comm->impl->Abort();
    return Status::Ok();
  });
}

braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    if (asyncError == nullptr) return Status::InvalidArgument("asyncError is NULL");
    *asyncError = static_cast<braidResult_t>(comm->impl->AsyncError().code());
    return Status::Ok();
  });
}

braidResult_t braidCommCount(const braidComm_t comm, int* count) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    if (count == nullptr) return Status::InvalidArgument("count is NULL");
    *count = comm->impl->size();
    return Status::Ok();
  });
}

braidResult_t braidCommUserRank(const braidComm_t comm, int* rank) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    if (rank == nullptr) return Status::InvalidArgument("rank is NULL");
    *rank = comm->impl->rank();
    return Status::Ok();
  });
}

braidResult_t braidCommCuDevice(const braidComm_t comm, int* device) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    if (device == nullptr) return Status::InvalidArgument("device is NULL");
    *device = comm->impl->CuDevice();
    return Status::Ok();
  });
}

}  // extern "C"

namespace {

using braid::algorithms::Collective;
using braid::algorithms::CollectiveArgs;

size_t ElementSize(braidDataType_t datatype) {
  return braid::DataTypeSize(static_cast<braid::DataType>(datatype));
}

Status CheckRank(int value, const char* name, braidComm_t comm) {
  int size = comm->impl->size();
  if (value < 0 || value >= size) {
    return Status::InvalidArgument(std::string(name) + " " + std::to_string(value) +
                                   " is outside [0, nranks=" + std::to_string(size) + ")");
  }
  return Status::Ok();
}

// count * multiple elements must fit in size_t bytes.
inline Status CheckCount(size_t count, size_t multiple, braidDataType_t datatype) {
  if (BytesOverflow(count, ElementSize(datatype), multiple)) {
    return OverflowError(count, multiple, datatype);
  }
  return Status::Ok();
}

// A collective on the live communicator `comm` refused for `bad_input`: the communicator tells
// the peers that would wait for this call (Communicator::FailOnBadInput).
BRAID_COLD Status RefuseCollective(braidComm_t comm, const Status& bad_input, Collective kind) {
  return comm->impl->FailOnBadInput(bad_input, braid::algorithms::CollectiveName(kind), true);
}

// The same for a send (`is_send`) or a receive.
BRAID_COLD Status RefuseTransfer(braidComm_t comm, const Status& bad_input, bool is_send) {
  return comm->impl->FailOnBadInput(bad_input, is_send ? "send" : "recv", false);
}

// BRAID_RETURN_IF_ERROR for a check of a call's input once its communicator is known to be live:
// a failure returns `refuse`(comm, the failure, `what`), a cold call, so the checks that pass
// cost what they did.
#define BRAID_REFUSE_IF_ERROR(expr, refuse, comm, what)                             \
  do {                                                                              \
    ::braid::Status braid_bad_input_ = (expr);                                      \
    if (!braid_bad_input_.ok()) return refuse(comm, braid_bad_input_, what);        \
  } while (0)

// One collective call as braid.h received it, with what its checks need to know, named at the
// call site (C++17 has no designated initializers, so named setters stand in for them):
//   Call(Collective::kReduce, sendbuff, recvbuff, count, datatype).Op(op).Root(root)
// Unset, a call takes no op and no root (sum and 0 are passed on), its buffers hold `count`
// elements, and this rank reads sendbuff and writes recvbuff. Everything is inline and the
// flags are constants in each entry point, so Collect's checks that a flag turns off fold away
// (the 2-rank 8-byte allreduce is counted to the instruction: docs/PERFORMANCE.md).
struct CollectiveCall {
  CollectiveArgs args;  // kind, buffers, count (type, op and root are filled in by Collect)
  braidDataType_t datatype = braidUint8;
  braidRedOp_t op = braidSum;
  bool uses_op = false;
  int root = 0;
  bool uses_root = false;
  size_t per_rank = 1;       // a buffer holds count * per_rank elements (checked for overflow)
  bool reads_send = true;    // this rank reads sendbuff
  bool writes_recv = true;   // this rank writes recvbuff

  // The reduction (allreduce, reduce, reduce-scatter); checked as a braidRedOp_t.
  CollectiveCall Op(braidRedOp_t value) const {
    CollectiveCall call = *this;
    call.op = value;
    call.uses_op = true;
    return call;
  }
  // The root (broadcast, reduce, gather, scatter); checked against the communicator's size.
  CollectiveCall Root(int value) const {
    CollectiveCall call = *this;
    call.root = value;
    call.uses_root = true;
    return call;
  }
  // count is one rank's share of a buffer of nranks * count elements.
  CollectiveCall PerRank(size_t nranks) const {
    CollectiveCall call = *this;
    call.per_rank = nranks;
    return call;
  }
  // Whether this rank reads sendbuff (NCCL: a non-root's may be NULL where only the root reads).
  CollectiveCall ReadsSend(bool value) const {
    CollectiveCall call = *this;
    call.reads_send = value;
    return call;
  }
  // Whether this rank writes recvbuff (NCCL: a non-root's may be NULL where only the root writes).
  CollectiveCall WritesRecv(bool value) const {
    CollectiveCall call = *this;
    call.writes_recv = value;
    return call;
  }
};

inline CollectiveCall Call(Collective kind, const void* sendbuff, void* recvbuff, size_t count,
                           braidDataType_t datatype) {
  CollectiveCall call;
  call.args.kind = kind;
  call.args.sendbuf = sendbuff;
  call.args.recvbuf = recvbuff;
  call.args.count = count;
  call.datatype = datatype;
  return call;
}

// Checks shared by every collective, then submits it (or queues it inside a group).
// Inlined into each entry point so that the call's flags, constants there, drop the checks they
// turn off.
__attribute__((always_inline)) inline braidResult_t Collect(braidComm_t comm, CollectiveCall call,
                                                            braidStream_t stream) {
  return Guarded(comm, [&]() __attribute__((always_inline)) -> Status {
    // A copy: SubmitCollective takes its address, and `call` itself must not escape, or its
    // flags would be stored to memory instead of folding away.
    CollectiveArgs args = call.args;
    const braidDataType_t datatype = call.datatype;
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    // The kind is named from `call`, whose fields are constants here, so it costs nothing until
    // a check fails.
    const Collective kind = call.args.kind;
    BRAID_REFUSE_IF_ERROR(CheckDataType(datatype), RefuseCollective, comm, kind);
    if (call.uses_op) BRAID_REFUSE_IF_ERROR(CheckOp(call.op), RefuseCollective, comm, kind);
    if (call.uses_root) {
      BRAID_REFUSE_IF_ERROR(CheckRank(call.root, "root", comm), RefuseCollective, comm, kind);
    }
    BRAID_REFUSE_IF_ERROR(CheckCount(args.count, call.per_rank, datatype), RefuseCollective, comm,
                          kind);
    if (call.reads_send) {
      BRAID_REFUSE_IF_ERROR(CheckBuffer(args.sendbuf, "sendbuff", args.count, datatype),
                            RefuseCollective, comm, kind);
    }
    if (call.writes_recv) {
      BRAID_REFUSE_IF_ERROR(CheckBuffer(args.recvbuf, "recvbuff", args.count, datatype),
                            RefuseCollective, comm, kind);
    }
    args.type = static_cast<braid::DataType>(datatype);
    args.op = call.uses_op ? static_cast<braid::ReduceOp>(call.op) : braid::ReduceOp::kSum;
    args.root = call.uses_root ? call.root : 0;
    // A stream, or a process that may hold device buffers: the cold path decides the route.
    if (__builtin_expect(stream != nullptr || braid::device_path::DevicePossible(), 0)) {
      const void* buffers[2] = {call.reads_send ? args.sendbuf : nullptr,
                                call.writes_recv ? args.recvbuf : nullptr};
      const char* names[2] = {"sendbuff", "recvbuff"};
      auto route = ChooseRoute(buffers, names, 2, stream);
      if (!route.ok()) return RefuseCollective(comm, route.status(), kind);
      if (route.value() == Route::kDevice) {
        if (args.count == 0 && args.kind != Collective::kBarrier) return Status::Ok();
        return braid::capi::SubmitDeviceCollective(comm, args, stream);
      }
    }
    if (args.count == 0 && args.kind != Collective::kBarrier) return Status::Ok();
    return braid::capi::SubmitCollective(comm, args);
  });
}

// Which rank this is, or -1 if the communicator is not live (Collect then reports that).
int RankOf(braidComm_t comm) {
  return braid::capi::CheckComm(comm).ok() ? comm->impl->rank() : -1;
}

// nranks, or 1 if the communicator is not live (Collect then reports that).
size_t SizeOf(braidComm_t comm) {
  return static_cast<size_t>(braid::capi::CheckComm(comm).ok() ? comm->impl->size() : 1);
}

braidResult_t Transfer(bool is_send, const void* sendbuff, void* recvbuff, size_t count,
                       braidDataType_t datatype, int peer, braidComm_t comm, braidStream_t stream) {
  return Guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    BRAID_REFUSE_IF_ERROR(CheckDataType(datatype), RefuseTransfer, comm, is_send);
    BRAID_REFUSE_IF_ERROR(CheckRank(peer, "peer", comm), RefuseTransfer, comm, is_send);
    BRAID_REFUSE_IF_ERROR(CheckCount(count, 1, datatype), RefuseTransfer, comm, is_send);
    BRAID_REFUSE_IF_ERROR(is_send ? CheckBuffer(sendbuff, "sendbuff", count, datatype)
                                  : CheckBuffer(recvbuff, "recvbuff", count, datatype),
                          RefuseTransfer, comm, is_send);
    braid::Communicator::PeerTransfer transfer;
    transfer.is_send = is_send;
    transfer.peer = peer;
    transfer.sendbuf = sendbuff;
    transfer.recvbuf = recvbuff;
    transfer.bytes = count * ElementSize(datatype);
    if (stream != nullptr || braid::device_path::DevicePossible()) {
      const void* buffer = is_send ? sendbuff : static_cast<const void*>(recvbuff);
      const char* name = is_send ? "sendbuff" : "recvbuff";
      auto route = ChooseRoute(&buffer, &name, 1, stream);
      if (!route.ok()) return RefuseTransfer(comm, route.status(), is_send);
      if (route.value() == Route::kDevice) return braid::capi::SubmitDeviceTransfer(comm, transfer, stream);
    }
    return braid::capi::SubmitTransfer(comm, transfer);
  });
}

}  // namespace

extern "C" {

braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                             braidStream_t stream) {
  return Collect(comm, Call(Collective::kAllReduce, sendbuff, recvbuff, count, datatype).Op(op),
                 stream);
}

braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, int root, braidComm_t comm,
                             braidStream_t stream) {
  // Only the root reads sendbuff (NCCL: non-roots may pass NULL).
  return Collect(comm,
                 Call(Collective::kBroadcast, sendbuff, recvbuff, count, datatype)
                     .Root(root)
                     .ReadsSend(RankOf(comm) == root),
                 stream);
}

braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count,
                          braidDataType_t datatype, braidRedOp_t op, int root, braidComm_t comm,
                          braidStream_t stream) {
  // Only the root writes recvbuff.
  return Collect(comm,
                 Call(Collective::kReduce, sendbuff, recvbuff, count, datatype)
                     .Op(op)
                     .Root(root)
                     .WritesRecv(RankOf(comm) == root),
                 stream);
}

braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             braidDataType_t datatype, braidComm_t comm, braidStream_t stream) {
  return Collect(comm,
                 Call(Collective::kAllGather, sendbuff, recvbuff, sendcount, datatype)
                     .PerRank(SizeOf(comm)),
                 stream);
}

braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                 braidStream_t stream) {
  return Collect(comm,
                 Call(Collective::kReduceScatter, sendbuff, recvbuff, recvcount, datatype)
                     .Op(op)
                     .PerRank(SizeOf(comm)),
                 stream);
}

braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                            braidDataType_t datatype, braidComm_t comm, braidStream_t stream) {
  return Collect(comm,
                 Call(Collective::kAllToAll, sendbuff, recvbuff, count, datatype)
                     .PerRank(SizeOf(comm)),
                 stream);
}

braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                          braidDataType_t datatype, int root, braidComm_t comm,
                          braidStream_t stream) {
  return Collect(comm,
                 Call(Collective::kGather, sendbuff, recvbuff, sendcount, datatype)
                     .Root(root)
                     .PerRank(SizeOf(comm))
                     .WritesRecv(RankOf(comm) == root),
                 stream);
}

braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           braidDataType_t datatype, int root, braidComm_t comm,
                           braidStream_t stream) {
  return Collect(comm,
                 Call(Collective::kScatter, sendbuff, recvbuff, recvcount, datatype)
                     .Root(root)
                     .PerRank(SizeOf(comm))
                     .ReadsSend(RankOf(comm) == root),
                 stream);
}

braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer,
                        braidComm_t comm, braidStream_t stream) {
  return Transfer(true, sendbuff, nullptr, count, datatype, peer, comm, stream);
}

braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer,
                        braidComm_t comm, braidStream_t stream) {
  return Transfer(false, nullptr, recvbuff, count, datatype, peer, comm, stream);
}

// Bad input here is returned as it is, unlike a collective's, send's or receive's: a receive from
// any rank names no peer that waits for it, and a sender's message stays for a later receive.
braidResult_t braidRecvAny(void* recvbuff, size_t count, braidDataType_t datatype, int* peer,
                           braidComm_t comm, braidStream_t stream) {
  return Guarded(comm, [&]() -> Status {
    if (peer != nullptr) *peer = -1;  // until a message is received
    BRAID_RETURN_IF_ERROR(braid::capi::CheckComm(comm));
    BRAID_RETURN_IF_ERROR(CheckDataType(datatype));
    if (peer == nullptr) return Status::InvalidArgument("peer (the output pointer) is NULL");
    BRAID_RETURN_IF_ERROR(CheckCount(count, 1, datatype));
    BRAID_RETURN_IF_ERROR(CheckBuffer(recvbuff, "recvbuff", count, datatype));
    BRAID_RETURN_IF_ERROR(CheckHostStream(stream));
    if (braid::device_path::DevicePossible()) {
      const void* buffer = recvbuff;
      const char* name = "recvbuff";
      auto route = ChooseRoute(&buffer, &name, 1, nullptr);
      if (!route.ok()) return route.status();
      if (route.value() == Route::kDevice) {
        return Status::InvalidUsage("braidRecvAny takes host buffers only; recvbuff is device memory");
      }
    }
    if (braid::capi::InGroup()) {
      return Status::InvalidUsage(
          "braidRecvAny inside braidGroupStart/braidGroupEnd is not supported (which receive "
          "it would pair with is only known when a message arrives)");
    }
    return comm->impl->ReceiveFromAny(recvbuff, count * ElementSize(datatype), peer);
  });
}

braidResult_t braidBarrier(braidComm_t comm, braidStream_t stream) {
  return Collect(comm,
                 Call(Collective::kBarrier, nullptr, nullptr, 0, braidUint8)
                     .ReadsSend(false)
                     .WritesRecv(false),
                 stream);
}

braidResult_t braidGroupStart(void) {
  return Guarded(nullptr, [] { return braid::capi::GroupStart(); });
}

braidResult_t braidGroupEnd(void) {
  return Guarded(nullptr, [] { return braid::capi::GroupEnd(); });
}

}  // extern "C"
