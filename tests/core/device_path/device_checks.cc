#include "tests/core/device_path/device_checks.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tests/collectives/reference.h"

namespace braid::testing {
namespace {

constexpr unsigned char kGuard = 0x5A;
constexpr size_t kGuardBytes = 64;
constexpr int64_t kSyncMs = 60000;

// Data-movement values that name source, destination and index (as collective_checks does,
// written again here so the two oracles stay independent).
double Encoded(braidDataType_t type, int src, int dst, size_t i) {
  const int64_t m = (type == braidInt8 || type == braidUint8 || type == braidBfloat16) ? 127
                    : type == braidFloat16                                             ? 2039
                                                                                       : 1000003;
  return static_cast<double>((src * 53 + dst * 17 + static_cast<int64_t>(i % static_cast<size_t>(m)) + 1) % m);
}

void FillEncoded(braidDataType_t type, char* buffer, size_t block, size_t count, int src, int dst) {
  for (size_t i = 0; i < count; ++i) Store(type, buffer, block * count + i, Encoded(type, src, dst, i));
}

std::string CheckEncoded(braidDataType_t type, const char* buffer, size_t block, size_t count, int src, int dst) {
  for (size_t i = 0; i < count; ++i) {
    const double got = Load(type, buffer, block * count + i);
    const double want = Encoded(type, src, dst, i);
    if (!(got == want)) {
      return "block " + std::to_string(block) + " element " + std::to_string(i) + " is " + std::to_string(got) +
             ", expected " + std::to_string(want) + " (from rank " + std::to_string(src) + " to rank " +
             std::to_string(dst) + ")";
    }
  }
  return "";
}

// One device allocation with its host image, copied on the stream.
struct DeviceBuffer {
  std::unique_ptr<device::Memory> memory;
  std::vector<char> host;  // the image copied in, then what came back
  char* data() const { return static_cast<char*>(memory->data()); }
};

std::string Make(device::Device& device, size_t bytes, DeviceBuffer* out) {
  auto memory = device.Allocate(bytes + kGuardBytes);
  if (!memory.ok()) return "Allocate: " + memory.status().ToString();
  out->memory = std::move(memory).value();
  out->host.assign(bytes + kGuardBytes, static_cast<char>(kGuard));
  return "";
}

std::string CopyIn(device::Stream& stream, DeviceBuffer& buffer) {
  Status status = stream.Copy(buffer.data(), buffer.host.data(), buffer.host.size());
  return status.ok() ? "" : "copy to the device: " + status.ToString();
}

std::string CopyOut(device::Stream& stream, DeviceBuffer& buffer) {
  Status status = stream.Copy(buffer.host.data(), buffer.data(), buffer.host.size());
  return status.ok() ? "" : "copy from the device: " + status.ToString();
}

std::string GuardIntact(const DeviceBuffer& buffer, size_t bytes, const char* name) {
  for (size_t b = bytes; b < buffer.host.size(); ++b) {
    if (static_cast<unsigned char>(buffer.host[b]) != kGuard) return std::string("wrote past the end of ") + name;
  }
  return "";
}

// Waits for the stream before the buffers it copies go (declared after them): a check that fails
// half way must not free memory a copy still writes.
struct SyncOnExit {
  device::Stream* stream;
  ~SyncOnExit() { (void)stream->Synchronize(Deadline::AfterMs(kSyncMs)); }
};

#define CHECK_STEP(expr)                   \
  do {                                     \
    std::string step_ = (expr);            \
    if (!step_.empty()) return step_;      \
  } while (0)

// The stream braid gets (NULL for the legacy default) and the one the test copies on.
struct Streams {
  device::Stream* copies;
  void* native;
};

std::string Failed(braidComm_t comm, braidResult_t rc, const char* what) {
  return std::string(what) + ": " + braidGetErrorString(rc) + ": " + braidGetLastError(comm);
}

std::string RunOne(braidComm_t comm, int rank, int n, const Call& c, device::Device& device, Streams s) {
  const size_t e = TypeSize(c.type);
  const size_t block = c.count * e;
  const size_t all = block * static_cast<size_t>(n);
  const bool root = rank == c.root;
  DeviceBuffer send, recv;
  SyncOnExit sync_on_exit{s.copies};
  // Sizes of what this rank passes; in place everything lives in `send`.
  size_t send_bytes = block, recv_bytes = block;
  switch (c.coll) {
    case Coll::kAllGather: case Coll::kGather: recv_bytes = all; break;
    case Coll::kReduceScatter: case Coll::kScatter: send_bytes = all; break;
    case Coll::kAllToAll: send_bytes = recv_bytes = all; break;
    default: break;
  }
  const size_t buffer_bytes = c.in_place ? std::max(send_bytes, recv_bytes) : send_bytes;
  CHECK_STEP(Make(device, buffer_bytes, &send));
  if (!c.in_place) CHECK_STEP(Make(device, recv_bytes, &recv));
  char* image = send.host.data();  // this rank's input image (in place: the whole buffer)
  // Inputs.
  switch (c.coll) {
    case Coll::kAllReduce: case Coll::kReduce: {
      std::vector<char> in = MakeInput(c.type, c.op, rank, c.count);
      std::memcpy(image, in.data(), block);
      break;
    }
    case Coll::kReduceScatter: {
      std::vector<char> in = MakeInput(c.type, c.op, rank, c.count * n);
      std::memcpy(image, in.data(), all);
      break;
    }
    case Coll::kBroadcast:  // only the root's input exists; a non-root's is guard bytes
      if (root) FillEncoded(c.type, image, 0, c.count, c.root, 0);
      break;
    case Coll::kAllGather: FillEncoded(c.type, image, c.in_place ? rank : 0, c.count, rank, 0); break;
    case Coll::kGather: FillEncoded(c.type, image, c.in_place ? rank : 0, c.count, rank, c.root); break;
    case Coll::kAllToAll:
      for (int p = 0; p < n; ++p) FillEncoded(c.type, image, p, c.count, rank, p);
      break;
    case Coll::kScatter:
      if (root) {
        for (int p = 0; p < n; ++p) FillEncoded(c.type, image, p, c.count, c.root, p);
      }
      break;
  }
  const std::vector<char> input = send.host;
  CHECK_STEP(CopyIn(*s.copies, send));
  if (!c.in_place) CHECK_STEP(CopyIn(*s.copies, recv));
  // Pointers as NCCL's in-place rules place them.
  char* sb = send.data();
  char* rb = c.in_place ? send.data() : recv.data();
  const size_t mine = static_cast<size_t>(rank) * block;
  braidResult_t rc = braidSuccess;
  switch (c.coll) {
    case Coll::kAllReduce: rc = braidAllReduce(sb, rb, c.count, c.type, c.op, comm, s.native); break;
    case Coll::kBroadcast: rc = braidBroadcast(sb, rb, c.count, c.type, c.root, comm, s.native); break;
    case Coll::kReduce: rc = braidReduce(sb, rb, c.count, c.type, c.op, c.root, comm, s.native); break;
    case Coll::kAllGather:
      rc = braidAllGather(c.in_place ? rb + mine : sb, rb, c.count, c.type, comm, s.native);
      break;
    case Coll::kReduceScatter:
      rc = braidReduceScatter(sb, c.in_place ? sb + mine : rb, c.count, c.type, c.op, comm, s.native);
      break;
    case Coll::kAllToAll: rc = braidAllToAll(sb, rb, c.count, c.type, comm, s.native); break;
    case Coll::kGather:
      rc = braidGather(c.in_place ? rb + mine : sb, rb, c.count, c.type, c.root, comm, s.native);
      break;
    case Coll::kScatter:
      rc = braidScatter(sb, c.in_place ? sb + mine : rb, c.count, c.type, c.root, comm, s.native);
      break;
  }
  if (rc != braidSuccess) return Failed(comm, rc, "the call");
  CHECK_STEP(CopyOut(*s.copies, send));
  if (!c.in_place) CHECK_STEP(CopyOut(*s.copies, recv));
  Status synced = s.copies->Synchronize(Deadline::AfterMs(kSyncMs));
  if (!synced.ok()) return "synchronize: " + synced.ToString();
  braidResult_t async = braidSuccess;
  braidCommGetAsyncError(comm, &async);
  if (async != braidSuccess) return Failed(comm, async, "async error");
  const char* result = c.in_place ? send.host.data() : recv.host.data();
  std::string wrong;
  switch (c.coll) {
    case Coll::kAllReduce: wrong = CheckReduced(c.type, c.op, n, result, c.count); break;
    case Coll::kBroadcast: wrong = CheckEncoded(c.type, result, 0, c.count, c.root, 0); break;
    case Coll::kReduce:
      if (root) wrong = CheckReduced(c.type, c.op, n, result, c.count);
      break;
    case Coll::kAllGather:
      for (int r = 0; r < n && wrong.empty(); ++r) wrong = CheckEncoded(c.type, result, r, c.count, r, 0);
      break;
    case Coll::kReduceScatter:
      wrong = CheckReducedRange(c.type, c.op, n, c.in_place ? result + mine : result, mine / e, c.count);
      break;
    case Coll::kAllToAll:
      for (int r = 0; r < n && wrong.empty(); ++r) wrong = CheckEncoded(c.type, result, r, c.count, r, rank);
      break;
    case Coll::kGather:
      if (root) {
        for (int r = 0; r < n && wrong.empty(); ++r) wrong = CheckEncoded(c.type, result, r, c.count, r, c.root);
      }
      break;
    case Coll::kScatter:
      wrong = CheckEncoded(c.type, c.in_place ? result + mine : result, 0, c.count, c.root, rank);
      break;
  }
  // Out of place the input comes back unchanged, and a non-root's unused output untouched.
  if (wrong.empty() && !c.in_place && send.host != input) wrong = "sendbuff was modified";
  if (wrong.empty() && !c.in_place && !root && (c.coll == Coll::kReduce || c.coll == Coll::kGather)) {
    for (size_t b = 0; b < recv_bytes && wrong.empty(); ++b) {
      if (static_cast<unsigned char>(recv.host[b]) != kGuard) wrong = "a non-root's recvbuff was written";
    }
  }
  if (wrong.empty()) wrong = c.in_place ? GuardIntact(send, buffer_bytes, "the buffer") : GuardIntact(recv, recv_bytes, "recvbuff");
  return wrong;
}

Streams StreamsFor(device::Device& device, device::Stream* stream, std::unique_ptr<device::Stream>* legacy) {
  if (stream != nullptr) return {stream, stream->native()};
  // NULL for braid: the test's copies go on the legacy default stream too.
  auto wrapped = device.WrapStream(nullptr);
  *legacy = wrapped.ok() ? std::move(wrapped).value() : nullptr;
  return {legacy->get(), nullptr};
}

}  // namespace

std::string RunDeviceCheck(braidComm_t comm, int rank, int size, const Call& call, device::Device& device,
                           device::Stream* stream) {
  std::unique_ptr<device::Stream> legacy;
  Streams s = StreamsFor(device, stream, &legacy);
  if (s.copies == nullptr) return "no legacy default stream from " + device.Describe();
  std::string wrong = RunOne(comm, rank, size, call, device, s);
  return wrong.empty() ? "" : Describe(call) + (stream == nullptr ? " (NULL stream)" : "") + ": " + wrong;
}

std::string RunDeviceSendRecvRing(braidComm_t comm, int rank, int size, braidDataType_t type, size_t count,
                                  device::Device& device, device::Stream* stream) {
  std::unique_ptr<device::Stream> legacy;
  Streams s = StreamsFor(device, stream, &legacy);
  if (s.copies == nullptr) return "no legacy default stream";
  const size_t bytes = count * TypeSize(type);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  DeviceBuffer send, recv;
  SyncOnExit sync_on_exit{s.copies};
  CHECK_STEP(Make(device, bytes, &send));
  CHECK_STEP(Make(device, bytes, &recv));
  FillEncoded(type, send.host.data(), 0, count, rank, next);
  CHECK_STEP(CopyIn(*s.copies, send));
  CHECK_STEP(CopyIn(*s.copies, recv));
  braidGroupStart();
  braidResult_t sent = braidSend(send.data(), count, type, next, comm, s.native);
  braidResult_t got = braidRecv(recv.data(), count, type, prev, comm, s.native);
  braidResult_t ended = braidGroupEnd();
  if (sent != braidSuccess) return Failed(comm, sent, "send/recv ring: braidSend");
  if (got != braidSuccess) return Failed(comm, got, "send/recv ring: braidRecv");
  if (ended != braidSuccess) return Failed(comm, ended, "send/recv ring: braidGroupEnd");
  CHECK_STEP(CopyOut(*s.copies, recv));
  Status synced = s.copies->Synchronize(Deadline::AfterMs(kSyncMs));
  if (!synced.ok()) return "send/recv ring: synchronize: " + synced.ToString();
  std::string wrong = CheckEncoded(type, recv.host.data(), 0, count, prev, rank);
  if (wrong.empty()) wrong = GuardIntact(recv, bytes, "recvbuff");
  return wrong.empty() ? "" : "send/recv ring of " + std::to_string(count) + ": " + wrong;
}

std::string RunDeviceUnevenBatch(braidComm_t comm, int rank, int size, size_t chunk_elems, device::Device& device,
                                 device::Stream* stream) {
  std::unique_ptr<device::Stream> legacy;
  Streams s = StreamsFor(device, stream, &legacy);
  if (s.copies == nullptr) return "no legacy default stream";
  const size_t c = chunk_elems;
  const size_t sizes[] = {1, c - 1, c, c + 1, 3 * c + 7, 8 * c};
  auto count = [&](int src, int dst) { return sizes[static_cast<size_t>(src * 5 + dst * 3) % 6]; };
  std::vector<DeviceBuffer> sends(static_cast<size_t>(size)), recvs(static_cast<size_t>(size));
  SyncOnExit sync_on_exit{s.copies};
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    CHECK_STEP(Make(device, count(rank, p) * 4, &sends[p]));
    CHECK_STEP(Make(device, count(p, rank) * 4, &recvs[p]));
    FillEncoded(braidFloat32, sends[p].host.data(), 0, count(rank, p), rank, p);
    CHECK_STEP(CopyIn(*s.copies, sends[p]));
    CHECK_STEP(CopyIn(*s.copies, recvs[p]));
  }
  braidGroupStart();
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    braidResult_t sent = braidSend(sends[p].data(), count(rank, p), braidFloat32, p, comm, s.native);
    braidResult_t got = braidRecv(recvs[p].data(), count(p, rank), braidFloat32, p, comm, s.native);
    if (sent != braidSuccess || got != braidSuccess) {
      braidGroupEnd();
      return Failed(comm, sent != braidSuccess ? sent : got, "uneven batch: braidSend/braidRecv");
    }
  }
  braidResult_t ended = braidGroupEnd();
  if (ended != braidSuccess) return Failed(comm, ended, "uneven batch: braidGroupEnd");
  for (int p = 0; p < size; ++p) {
    if (p != rank) CHECK_STEP(CopyOut(*s.copies, recvs[p]));
  }
  Status synced = s.copies->Synchronize(Deadline::AfterMs(kSyncMs));
  if (!synced.ok()) return "uneven batch: synchronize: " + synced.ToString();
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    std::string wrong = CheckEncoded(braidFloat32, recvs[p].host.data(), 0, count(p, rank), p, rank);
    if (wrong.empty()) wrong = GuardIntact(recvs[p], count(p, rank) * 4, "recvbuff");
    if (!wrong.empty()) {
      return "uneven batch, " + std::to_string(count(p, rank)) + " elements from rank " + std::to_string(p) + ": " +
             wrong;
    }
  }
  return "";
}

std::string RunDeviceTwoStreamGroup(braidComm_t comm, int rank, int size, size_t count, device::Device& device,
                                    device::Stream& a, device::Stream& b) {
  const size_t bytes = count * 4;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  auto hold_memory = device.AllocateHost(64);
  if (!hold_memory.ok()) return "AllocateHost: " + hold_memory.status().ToString();
  auto* hold = static_cast<uint32_t*>(hold_memory.value()->data());
  __atomic_store_n(hold, 0u, __ATOMIC_RELEASE);
  // Declared after the hold and before the buffers: whatever fails, the hold is lifted before the
  // streams are waited for, and they are waited for before any buffer goes.
  struct Lift {
    uint32_t* hold;
    device::Stream* a;
    device::Stream* b;
    ~Lift() {
      __atomic_store_n(hold, 1u, __ATOMIC_RELEASE);
      (void)a->Synchronize(Deadline::AfterMs(kSyncMs));
      (void)b->Synchronize(Deadline::AfterMs(kSyncMs));
    }
  };
  DeviceBuffer sum, send, recv;
  Lift lift{hold, &a, &b};
  CHECK_STEP(Make(device, bytes, &sum));
  CHECK_STEP(Make(device, bytes, &send));
  CHECK_STEP(Make(device, bytes, &recv));
  for (size_t i = 0; i < count; ++i) Store(braidInt32, sum.host.data(), i, static_cast<double>(rank + 1 + i % 7));
  FillEncoded(braidFloat32, send.host.data(), 0, count, rank, next);
  CHECK_STEP(CopyIn(a, sum));
  CHECK_STEP(CopyIn(a, recv));
  // b's input lands only after the hold is lifted, which is after braidGroupEnd has returned:
  // the group's work sees it only if it waits for b.
  Status held = b.WaitValue32(hold, 1);
  if (!held.ok()) return "WaitValue32: " + held.ToString();
  CHECK_STEP(CopyIn(b, send));
  braidGroupStart();
  braidResult_t reduced = braidAllReduce(sum.data(), sum.data(), count, braidInt32, braidSum, comm, a.native());
  braidResult_t sent = braidSend(send.data(), count, braidFloat32, next, comm, b.native());
  braidResult_t got = braidRecv(recv.data(), count, braidFloat32, prev, comm, b.native());
  braidResult_t ended = braidGroupEnd();
  if (reduced != braidSuccess || sent != braidSuccess || got != braidSuccess || ended != braidSuccess) {
    return Failed(comm, ended != braidSuccess ? ended : reduced != braidSuccess ? reduced : sent != braidSuccess ? sent : got,
                  "two-stream group");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  __atomic_store_n(hold, 1u, __ATOMIC_RELEASE);
  // Each result goes back on the other stream: both must wait for the group's work.
  CHECK_STEP(CopyOut(b, sum));
  CHECK_STEP(CopyOut(a, recv));
  for (device::Stream* stream : {&a, &b}) {
    Status synced = stream->Synchronize(Deadline::AfterMs(kSyncMs));
    if (!synced.ok()) return "two-stream group: synchronize: " + synced.ToString();
  }
  const double ranks_sum = size * (size + 1) / 2.0;
  for (size_t i = 0; i < count; ++i) {
    const double want = ranks_sum + size * static_cast<double>(i % 7);
    const double sum_got = Load(braidInt32, sum.host.data(), i);
    if (sum_got != want) {
      return "two-stream group: allreduce element " + std::to_string(i) + " is " + std::to_string(sum_got) +
             ", expected " + std::to_string(want);
    }
  }
  std::string wrong = CheckEncoded(braidFloat32, recv.host.data(), 0, count, prev, rank);
  return wrong.empty() ? "" : "two-stream group, the receive on the second stream: " + wrong;
}

std::string RunDeviceBackToBack(braidComm_t comm, int rank, int size, int ops, size_t count,
                                device::Device& device, device::Stream* stream) {
  std::unique_ptr<device::Stream> legacy;
  Streams s = StreamsFor(device, stream, &legacy);
  if (s.copies == nullptr) return "no legacy default stream";
  const size_t bytes = count * sizeof(int32_t);
  std::vector<DeviceBuffer> buffers(static_cast<size_t>(ops));
  SyncOnExit sync_on_exit{s.copies};
  for (int k = 0; k < ops; ++k) {
    CHECK_STEP(Make(device, bytes, &buffers[k]));
    // Op k's input: rank * (k + 1) + i, so each op's sum differs.
    for (size_t i = 0; i < count; ++i) {
      const int32_t v = rank * (k + 1) + static_cast<int32_t>(i % 1000);
      std::memcpy(buffers[k].host.data() + i * 4, &v, 4);
    }
    CHECK_STEP(CopyIn(*s.copies, buffers[k]));
    braidResult_t rc = braidAllReduce(buffers[k].data(), buffers[k].data(), count, braidInt32, braidSum, comm, s.native);
    if (rc != braidSuccess) return Failed(comm, rc, "back-to-back allreduce");
    CHECK_STEP(CopyOut(*s.copies, buffers[k]));
  }
  Status synced = s.copies->Synchronize(Deadline::AfterMs(kSyncMs));
  if (!synced.ok()) return "back-to-back: synchronize: " + synced.ToString();
  const int32_t ranks_sum = size * (size - 1) / 2;
  for (int k = 0; k < ops; ++k) {
    for (size_t i = 0; i < count; ++i) {
      int32_t got;
      std::memcpy(&got, buffers[k].host.data() + i * 4, 4);
      const int32_t want = ranks_sum * (k + 1) + size * static_cast<int32_t>(i % 1000);
      if (got != want) {
        return "back-to-back allreduce " + std::to_string(k) + " of " + std::to_string(ops) + ": element " +
               std::to_string(i) + " is " + std::to_string(got) + ", expected " + std::to_string(want);
      }
    }
  }
  return "";
}

std::string RunAllDeviceChecks(braidComm_t comm, int rank, int size, size_t count, device::Device& device,
                               device::Stream* stream) {
  const Coll colls[] = {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather,
                        Coll::kReduceScatter, Coll::kAllToAll, Coll::kGather, Coll::kScatter};
  const std::pair<braidDataType_t, braidRedOp_t> kinds[] = {{braidFloat32, braidSum}, {braidInt8, braidMax}};
  for (const auto& [type, op] : kinds) {
    for (Coll coll : colls) {
      for (bool in_place : {false, true}) {
        Call call;
        call.coll = coll;
        call.type = type;
        call.op = op;
        call.count = count;
        call.in_place = in_place;
        call.root = size - 1;
        CHECK_STEP(RunDeviceCheck(comm, rank, size, call, device, stream));
      }
    }
  }
  CHECK_STEP(RunDeviceSendRecvRing(comm, rank, size, braidFloat32, count, device, stream));
  return RunDeviceBackToBack(comm, rank, size, 4, count, device, stream);
}

std::string CheckLossReported(braidComm_t comm, void* d, void* native, const std::string& lost) {
  braidResult_t async = braidSuccess;
  if (braidCommGetAsyncError(comm, &async) != braidSuccess) return "braidCommGetAsyncError failed";
  if (async != braidRemoteError) return std::string("async error is ") + braidGetErrorString(async);
  // The next call returns the same error, whose message leads with the failed rank.
  const braidResult_t next = braidAllReduce(d, d, 16, braidFloat32, braidSum, comm, native);
  const std::string error = braidGetLastError(comm);
  if (next != braidRemoteError || error.find(lost) == std::string::npos) {
    return std::string("the next call: ") + braidGetErrorString(next) + ": " + error;
  }
  return "";
}

std::string CheckAbortReleases(braidComm_t comm, device::Stream& stream) {
  Status blocked = stream.Synchronize(Deadline::AfterMs(300));
  if (blocked.code() != Code::kTimeout) return "the stream was not blocked on the missing peer: " + blocked.ToString();
  if (braidCommAbort(comm) != braidSuccess) return std::string("abort: ") + braidGetLastError(comm);
  Status released = stream.Synchronize(Deadline::AfterMs(5000));
  if (!released.ok()) return "the stream stayed blocked after braidCommAbort: " + released.ToString();
  braidResult_t async = braidSuccess;
  if (braidCommGetAsyncError(comm, &async) != braidSuccess) return "braidCommGetAsyncError failed";
  if (async != braidAborted) return std::string("async error after abort is ") + braidGetErrorString(async);
  return "";
}

}  // namespace braid::testing
