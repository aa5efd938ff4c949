// The device seam's contract (core/device/device.h) as checks that run against any Device: the
// CPU simulation in CI (simulated_device_test) and CUDA on the GPU machine (tests/gpu/
// device_gpu_test). Each check returns "" or what went wrong. Data the host inspects lives in
// AllocateHost memory, which both the host and the streams reach on every implementation.
//
// How "not yet" is observed: a stream is held by WaitValue32 on a gate flag the host opens
// later; while it is closed, nothing behind the gate may have happened (checked after a pause
// long enough for a wrongly ordered item to have run), and after it opens everything must.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/datatype.h"
#include "core/device/device.h"
#include "kernels/cpu/reduce.h"
#include "tests/kernels/element_compare.h"

namespace braid::device::conformance {

inline void HostStore(uint32_t* flag, uint32_t value) { __atomic_store_n(flag, value, __ATOMIC_RELEASE); }
inline uint32_t HostLoad(const uint32_t* flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }
inline void Pause() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

#define BRAID_CONFORM_OK(expr)                                                    \
  do {                                                                            \
    const ::braid::Status conform_status_ = (expr);                               \
    if (!conform_status_.ok()) return std::string(#expr) + ": " + conform_status_.ToString(); \
  } while (0)
#define BRAID_CONFORM_ASSIGN(lhs, expr)                                           \
  auto lhs##_result = (expr);                                                     \
  if (!lhs##_result.ok()) return std::string(#expr) + ": " + lhs##_result.status().ToString(); \
  auto lhs = std::move(lhs##_result).value()
#define BRAID_CONFORM_EXPECT(cond, text) \
  do {                                   \
    if (!(cond)) return std::string(text) + " (" #cond ")"; \
  } while (0)

inline Deadline Soon() { return Deadline::AfterMs(10000); }

// Work on one stream runs in enqueue order, and enqueueing does not wait for it.
inline std::string StreamRunsInOrder(Device& device) {
  constexpr size_t kCount = 1000;
  BRAID_CONFORM_ASSIGN(stream, device.NewStream());
  BRAID_CONFORM_ASSIGN(event, device.NewEvent());
  BRAID_CONFORM_ASSIGN(flags, device.AllocateHost(64));
  BRAID_CONFORM_ASSIGN(host, device.AllocateHost(3 * kCount * sizeof(float)));
  auto* gate = static_cast<uint32_t*>(flags->data());
  float* src = static_cast<float*>(host->data());
  float* mid = src + kCount;
  float* dst = mid + kCount;
  for (size_t i = 0; i < kCount; ++i) src[i] = static_cast<float>(i) * 0.5f;
  BRAID_CONFORM_OK(stream->WaitValue32(gate, 1));
  BRAID_CONFORM_OK(stream->Copy(mid, src, kCount * sizeof(float)));
  BRAID_CONFORM_OK(stream->Copy(dst, mid, kCount * sizeof(float)));
  BRAID_CONFORM_OK(stream->Reduce(DataType::kFloat32, ReduceOp::kSum, dst, dst, src, kCount));
  BRAID_CONFORM_OK(stream->Record(*event));
  Pause();
  BRAID_CONFORM_ASSIGN(done_early, event->Query());
  BRAID_CONFORM_EXPECT(!done_early, "the event completed while the stream was held at its gate");
  BRAID_CONFORM_EXPECT(dst[kCount - 1] == 0.0f, "work behind a closed gate ran");
  HostStore(gate, 1);
  BRAID_CONFORM_OK(stream->Synchronize(Soon()));
  BRAID_CONFORM_ASSIGN(done, event->Query());
  BRAID_CONFORM_EXPECT(done, "the event is not complete after Synchronize");
  for (size_t i = 0; i < kCount; ++i) {
    if (dst[i] != src[i] * 2) return "element " + std::to_string(i) + " is " + std::to_string(dst[i]);
  }
  return "";
}

// An event recorded on one stream holds another stream that waits for it.
inline std::string EventOrdersStreams(Device& device) {
  constexpr size_t kBytes = 4096;
  BRAID_CONFORM_ASSIGN(producer, device.NewStream());
  BRAID_CONFORM_ASSIGN(consumer, device.NewStream());
  BRAID_CONFORM_ASSIGN(event, device.NewEvent());
  BRAID_CONFORM_ASSIGN(flags, device.AllocateHost(64));
  BRAID_CONFORM_ASSIGN(host, device.AllocateHost(3 * kBytes));
  auto* gate = static_cast<uint32_t*>(flags->data());
  auto* src = static_cast<uint8_t*>(host->data());
  uint8_t* mid = src + kBytes;
  uint8_t* dst = mid + kBytes;
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  BRAID_CONFORM_OK(producer->WaitValue32(gate, 1));
  BRAID_CONFORM_OK(producer->Copy(mid, src, kBytes));
  BRAID_CONFORM_OK(producer->Record(*event));
  BRAID_CONFORM_OK(consumer->Wait(*event));
  BRAID_CONFORM_OK(consumer->Copy(dst, mid, kBytes));
  Pause();
  BRAID_CONFORM_EXPECT(dst[0] == 0 && dst[kBytes - 1] == 0, "the consumer ran before the producer's event");
  HostStore(gate, 1);
  BRAID_CONFORM_OK(consumer->Synchronize(Soon()));
  BRAID_CONFORM_EXPECT(std::memcmp(dst, src, kBytes) == 0, "the consumer copied before the producer's data was there");
  BRAID_CONFORM_OK(producer->Synchronize(Soon()));
  return "";
}

// Stream::Wait binds to the latest Record enqueued before it, not to a later one.
inline std::string WaitBindsToLatestRecord(Device& device) {
  BRAID_CONFORM_ASSIGN(recorder, device.NewStream());
  BRAID_CONFORM_ASSIGN(early, device.NewStream());
  BRAID_CONFORM_ASSIGN(late, device.NewStream());
  BRAID_CONFORM_ASSIGN(event, device.NewEvent());
  BRAID_CONFORM_ASSIGN(flags, device.AllocateHost(64));
  auto* gate = static_cast<uint32_t*>(flags->data());
  uint32_t* early_done = gate + 1;
  uint32_t* late_done = gate + 2;
  BRAID_CONFORM_OK(recorder->Record(*event));
  BRAID_CONFORM_OK(recorder->Synchronize(Soon()));
  BRAID_CONFORM_OK(early->Wait(*event));  // binds to the first record, which is complete
  BRAID_CONFORM_OK(early->WriteValue32(early_done, 1));
  BRAID_CONFORM_OK(recorder->WaitValue32(gate, 1));
  BRAID_CONFORM_OK(recorder->Record(*event));  // the second record, held at the gate
  BRAID_CONFORM_OK(late->Wait(*event));
  BRAID_CONFORM_OK(late->WriteValue32(late_done, 1));
  BRAID_CONFORM_OK(early->Synchronize(Soon()));
  BRAID_CONFORM_EXPECT(HostLoad(early_done) == 1, "a wait issued before the re-record waited for it");
  Pause();
  BRAID_CONFORM_EXPECT(HostLoad(late_done) == 0, "a wait issued after the re-record did not wait for it");
  BRAID_CONFORM_ASSIGN(done_early, event->Query());
  BRAID_CONFORM_EXPECT(!done_early, "a re-recorded event reads complete before its new record");
  HostStore(gate, 1);
  BRAID_CONFORM_OK(late->Synchronize(Soon()));
  BRAID_CONFORM_EXPECT(HostLoad(late_done) == 1, "the late wait never ended");
  BRAID_CONFORM_OK(recorder->Synchronize(Soon()));
  return "";
}

// WriteValue32 lands after the stream's earlier work: a host that sees the flag sees the data.
inline std::string FlagFollowsWork(Device& device) {
  constexpr size_t kBytes = 1 << 20;
  BRAID_CONFORM_ASSIGN(stream, device.NewStream());
  BRAID_CONFORM_ASSIGN(flags, device.AllocateHost(64));
  BRAID_CONFORM_ASSIGN(host, device.AllocateHost(2 * kBytes));
  auto* gate = static_cast<uint32_t*>(flags->data());
  uint32_t* ready = gate + 1;
  auto* src = static_cast<uint8_t*>(host->data());
  uint8_t* dst = src + kBytes;
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i ^ (i >> 8));
  BRAID_CONFORM_OK(stream->WaitValue32(gate, 1));
  BRAID_CONFORM_OK(stream->Copy(dst, src, kBytes));
  BRAID_CONFORM_OK(stream->WriteValue32(ready, 5));
  Pause();
  BRAID_CONFORM_EXPECT(HostLoad(ready) == 0, "the flag was written before the work ahead of it");
  HostStore(gate, 1);
  const Deadline deadline = Soon();
  while (HostLoad(ready) != 5) {
    if (deadline.Expired()) return "the flag was never written";
    std::this_thread::yield();
  }
  BRAID_CONFORM_EXPECT(std::memcmp(dst, src, kBytes) == 0, "the flag was visible before the copy's data");
  BRAID_CONFORM_OK(stream->Synchronize(Soon()));
  return "";
}

// WaitValue32 compares cyclically, as cuStreamWaitValue32's GEQ does: a counter may wrap.
inline std::string WaitValueIsCyclic(Device& device) {
  BRAID_CONFORM_ASSIGN(stream, device.NewStream());
  BRAID_CONFORM_ASSIGN(flags, device.AllocateHost(64));
  auto* counter = static_cast<uint32_t*>(flags->data());
  uint32_t* passed = counter + 1;
  HostStore(counter, 0xFFFFFFF0u);
  BRAID_CONFORM_OK(stream->WaitValue32(counter, 0xFFFFFFF0u));  // already reached
  BRAID_CONFORM_OK(stream->WriteValue32(passed, 1));
  BRAID_CONFORM_OK(stream->WaitValue32(counter, 0xFFFFFFF8u));  // not yet
  BRAID_CONFORM_OK(stream->WriteValue32(passed, 2));
  const Deadline deadline = Soon();
  while (HostLoad(passed) != 1) {
    if (deadline.Expired()) return "a wait for a value already reached did not pass";
    std::this_thread::yield();
  }
  Pause();
  BRAID_CONFORM_EXPECT(HostLoad(passed) == 1, "a wait for a larger value passed early");
  HostStore(counter, 2);  // wrapped past 0xFFFFFFF8
  BRAID_CONFORM_OK(stream->Synchronize(Soon()));
  BRAID_CONFORM_EXPECT(HostLoad(passed) == 2, "a counter that wrapped past the value did not release the wait");
  return "";
}

// Synchronize gives up at its deadline with kTimeout, and works again once the stream can move.
inline std::string SynchronizeTimesOut(Device& device) {
  BRAID_CONFORM_ASSIGN(stream, device.NewStream());
  BRAID_CONFORM_ASSIGN(flags, device.AllocateHost(64));
  auto* gate = static_cast<uint32_t*>(flags->data());
  BRAID_CONFORM_OK(stream->WaitValue32(gate, 1));
  const auto start = std::chrono::steady_clock::now();
  const Status timed_out = stream->Synchronize(Deadline::AfterMs(100));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BRAID_CONFORM_EXPECT(timed_out.code() == Code::kTimeout, "Synchronize on a held stream: " + timed_out.ToString());
  BRAID_CONFORM_EXPECT(waited >= 0.09 && waited < 5, "Synchronize waited " + std::to_string(waited) + " s");
  HostStore(gate, 1);
  BRAID_CONFORM_OK(stream->Synchronize(Soon()));
  return "";
}

// Reductions and divide on a stream equal kernels/cpu on the host.
inline std::string ReduceMatchesCpu(Device& device) {
  constexpr size_t kCount = 1031;
  BRAID_CONFORM_ASSIGN(stream, device.NewStream());
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16, DataType::kInt64,
                        DataType::kUint8}) {
    const size_t size = DataTypeSize(type);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
      BRAID_CONFORM_ASSIGN(host, device.AllocateHost(3 * kCount * size));
      auto* a = static_cast<uint8_t*>(host->data());
      uint8_t* b = a + kCount * size;
      uint8_t* out = b + kCount * size;
      uint32_t x = 12345;
      for (size_t i = 0; i < 2 * kCount * size; ++i) {
        x = x * 1103515245u + 12345u;
        a[i] = static_cast<uint8_t>(x >> 16);
      }
      std::vector<uint8_t> expected(kCount * size);
      kernels::ReduceInto(type, op, expected.data(), a, b, kCount);
      if (op == ReduceOp::kAvg) kernels::DivideInPlace(type, expected.data(), kCount, 4);
      BRAID_CONFORM_OK(stream->Reduce(type, op, out, a, b, kCount));
      if (op == ReduceOp::kAvg) BRAID_CONFORM_OK(stream->Divide(type, out, kCount, 4));
      BRAID_CONFORM_OK(stream->Synchronize(Soon()));
      const std::string diff = kernels::testing::FirstMismatch(type, expected.data(), out, kCount);
      if (!diff.empty()) return std::string(DataTypeName(type)) + " " + ReduceOpName(op) + ": " + diff;
    }
  }
  return "";
}

// ReduceMany of 1 to 8 inputs equals the left fold of kernels/cpu's pairwise reductions in input
// order, bit for bit, also with the output being the first or the last input; the float32 data is
// chosen so that folding in another order changes bits (checked here, so a fold in the wrong order
// cannot pass), and 0 or 9 inputs are refused.
inline std::string ReduceManyFoldsLeft(Device& device) {
  constexpr size_t kCount = 1031;
  constexpr int kMax = Stream::kMaxReduceInputs;
  BRAID_CONFORM_ASSIGN(stream, device.NewStream());
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kInt8}) {
    const size_t size = DataTypeSize(type);
    const size_t bytes = kCount * size;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int n = 1; n <= kMax; ++n) {
        for (int alias : {-1, 0, n - 1}) {  // out separate, out = the first input, out = the last
          BRAID_CONFORM_ASSIGN(host, device.AllocateHost((kMax + 1) * bytes));
          auto* base = static_cast<uint8_t*>(host->data());
          uint32_t x = 777u + static_cast<uint32_t>(n);
          for (int k = 0; k < n; ++k) {
            for (size_t i = 0; i < kCount; ++i) {
              x = x * 1103515245u + 12345u;
              uint8_t* at = base + k * bytes + i * size;
              if (type == DataType::kFloat32) {
                // Magnitudes 2^-10 .. 2^20 with random mantissas: sums round differently by order.
                const float value = std::ldexp(static_cast<float>(x >> 8) / 16777216.0f - 0.5f,
                                               static_cast<int>((x >> 3) % 31) - 10);
                std::memcpy(at, &value, sizeof(value));
              } else {
                for (size_t b = 0; b < size; ++b) at[b] = static_cast<uint8_t>(x >> (8 + 8 * b));
                if (type == DataType::kFloat16) at[1] &= 0x5b;  // finite halves
              }
            }
          }
          std::vector<const void*> inputs;
          for (int k = 0; k < n; ++k) inputs.push_back(base + k * bytes);
          std::vector<uint8_t> expected(static_cast<const uint8_t*>(inputs[0]),
                                        static_cast<const uint8_t*>(inputs[0]) + bytes);
          for (int k = 1; k < n; ++k) kernels::ReduceInto(type, op, expected.data(), expected.data(), inputs[k], kCount);
          if (type == DataType::kFloat32 && op == ReduceOp::kSum && n >= 3) {
            std::vector<uint8_t> reversed(static_cast<const uint8_t*>(inputs[n - 1]),
                                          static_cast<const uint8_t*>(inputs[n - 1]) + bytes);
            for (int k = n - 2; k >= 0; --k) kernels::ReduceInto(type, op, reversed.data(), reversed.data(), inputs[k], kCount);
            BRAID_CONFORM_EXPECT(reversed != expected, "the check's data sums alike in either order at n=" +
                                                            std::to_string(n) + ": it could not catch a wrong order");
          }
          void* out = alias < 0 ? base + kMax * bytes : const_cast<void*>(inputs[alias]);
          BRAID_CONFORM_OK(stream->ReduceMany(type, op, out, inputs.data(), n, kCount));
          inputs.assign(inputs.size(), nullptr);  // the stream must not read the list after the call
          BRAID_CONFORM_OK(stream->Synchronize(Soon()));
          const std::string diff = kernels::testing::FirstMismatch(type, expected.data(), static_cast<const uint8_t*>(out), kCount);
          if (!diff.empty()) {
            return std::string(DataTypeName(type)) + " " + ReduceOpName(op) + " of " + std::to_string(n) +
                   " inputs (out " + (alias < 0 ? "separate" : "= input " + std::to_string(alias)) + "): " + diff;
          }
        }
      }
    }
  }
  BRAID_CONFORM_ASSIGN(host, device.AllocateHost(64));
  const void* nine[9] = {};
  for (auto& p : nine) p = host->data();
  const Status none = stream->ReduceMany(DataType::kFloat32, ReduceOp::kSum, host->data(), nine, 0, 4);
  const Status too_many = stream->ReduceMany(DataType::kFloat32, ReduceOp::kSum, host->data(), nine, 9, 4);
  BRAID_CONFORM_EXPECT(none.code() == Code::kInvalidArgument, "0 inputs: " + none.ToString());
  BRAID_CONFORM_EXPECT(too_many.code() == Code::kInvalidArgument, "9 inputs: " + too_many.ToString());
  return "";
}

// Bad arguments are kInvalidArgument at enqueue, and the stream still works after them.
inline std::string BadArgumentsAreRefused(Device& device) {
  BRAID_CONFORM_ASSIGN(stream, device.NewStream());
  BRAID_CONFORM_ASSIGN(host, device.AllocateHost(64));
  void* p = host->data();
  const std::pair<const char*, Status> refusals[] = {
      {"invalid dtype", stream->Reduce(static_cast<DataType>(42), ReduceOp::kSum, p, p, p, 4)},
      {"invalid op", stream->Reduce(DataType::kFloat32, static_cast<ReduceOp>(-3), p, p, p, 4)},
      {"null input", stream->Reduce(DataType::kFloat32, ReduceOp::kSum, p, nullptr, p, 4)},
      {"divisor 0", stream->Divide(DataType::kFloat32, p, 4, 0)},
      {"copy from null", stream->Copy(p, nullptr, 4)},
      {"null flag", stream->WaitValue32(nullptr, 1)},
      {"zero-byte allocation", device.Allocate(0).status()},
  };
  for (const auto& [what, status] : refusals) {
    if (status.code() != Code::kInvalidArgument) return std::string(what) + ": " + status.ToString();
  }
  BRAID_CONFORM_OK(stream->Copy(static_cast<uint8_t*>(p) + 32, p, 32));
  BRAID_CONFORM_OK(stream->Synchronize(Soon()));
  return "";
}

// Memory exported by a process cannot be imported by the same process (CUDA refuses it).
inline std::string SameProcessImportIsRefused(Device& device) {
  BRAID_CONFORM_ASSIGN(memory, device.Allocate(4096));
  BRAID_CONFORM_ASSIGN(handle, device.Export(*memory));
  const auto imported = device.Import(handle);
  BRAID_CONFORM_EXPECT(!imported.ok(), "importing in the exporting process succeeded");
  BRAID_CONFORM_EXPECT(imported.status().code() == Code::kInvalidUsage, imported.status().ToString());
  return "";
}

// Every check above, by name, for the runners.
inline std::vector<std::pair<const char*, std::function<std::string(Device&)>>> AllChecks() {
  return {
      {"stream runs in order", StreamRunsInOrder},
      {"event orders streams", EventOrdersStreams},
      {"wait binds to the latest record", WaitBindsToLatestRecord},
      {"flag follows work", FlagFollowsWork},
      {"wait-value is cyclic", WaitValueIsCyclic},
      {"synchronize times out", SynchronizeTimesOut},
      {"reduce matches kernels/cpu", ReduceMatchesCpu},
      {"reduce-many folds left in input order", ReduceManyFoldsLeft},
      {"bad arguments are refused", BadArgumentsAreRefused},
      {"same-process import is refused", SameProcessImportIsRefused},
  };
}

}  // namespace braid::device::conformance
