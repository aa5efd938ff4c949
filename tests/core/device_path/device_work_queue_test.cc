// The device work queue's pipeline (core/device_path/device_work_queue.h) and the cuts of
// staged_op.h, on the CPU SIMULATION of the device seam, with host parts of the test's own in
// place of a communicator's collectives: so each step's share, its slot and its order can be
// watched directly. A host part here applies a known function to its slot; every element that
// comes back is checked against the closed form, so a step staged into the wrong slot, a slot
// refilled before its copy back, or a share cut at the wrong offset fails. That later steps are
// staged WHILE a host part runs (the overlap the pipeline exists for) is checked through the
// queue's ready flag: a queue that staged a step only after the previous host part finished
// would never show it. The simulation models ordering, not GPU timing.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/device/simulated_device.h"
#include "core/device_path/device_work_queue.h"
#include "core/device_path/staged_op.h"

namespace braid::device_path {
namespace {

using algorithms::Collective;
using algorithms::CollectiveArgs;

constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuard = 0x5A;

// What the queue reported through Options::fail.
struct Failures {
  std::mutex mu;
  std::vector<std::string> seen;
  void Add(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(s.ToString());
  }
};

struct Rig {
  std::unique_ptr<device::Device> sim = device::NewSimulatedDevice();
  Failures failures;
  std::unique_ptr<DeviceWorkQueue> queue;
  std::unique_ptr<device::Stream> stream;
  Rig() {
    DeviceWorkQueue::Options options;
    options.rank = 0;
    options.timeout_ms = 20000;
    options.fail = [this](const Status& s) { failures.Add(s); };
    auto made = DeviceWorkQueue::Create(sim.get(), options);
    REQUIRE(made.ok());
    queue = std::move(made).value();
    auto s = sim->NewStream();
    REQUIRE(s.ok());
    stream = std::move(s).value();
  }
  ~Rig() { (void)stream->Synchronize(Deadline::AfterMs(10000)); }
};

// A device buffer of `count` int32 holding in(i), with a guard past it; `image` is its host copy.
std::unique_ptr<device::Memory> Filled(Rig& rig, size_t count, int32_t (*in)(size_t), std::vector<int32_t>* image) {
  auto memory = rig.sim->Allocate(count * 4 + kGuardBytes);
  REQUIRE(memory.ok());
  image->resize(count);
  for (size_t i = 0; i < count; ++i) (*image)[i] = in(i);
  std::vector<unsigned char> bytes(count * 4 + kGuardBytes, kGuard);
  std::memcpy(bytes.data(), image->data(), count * 4);
  REQUIRE(rig.stream->Copy(memory.value()->data(), bytes.data(), bytes.size()).ok());
  REQUIRE(rig.stream->Synchronize(Deadline::AfterMs(10000)).ok());
  return std::move(memory).value();
}

// The buffer's contents after the stream's work, and whether its guard is intact.
std::vector<int32_t> Contents(Rig& rig, const device::Memory& memory, size_t count, bool* guard_ok) {
  std::vector<unsigned char> bytes(count * 4 + kGuardBytes);
  REQUIRE(rig.stream->Copy(bytes.data(), memory.data(), bytes.size()).ok());
  REQUIRE(rig.stream->Synchronize(Deadline::AfterMs(20000)).ok());
  std::vector<int32_t> out(count);
  std::memcpy(out.data(), bytes.data(), count * 4);
  *guard_ok = true;
  for (size_t b = count * 4; b < bytes.size(); ++b) *guard_ok = *guard_ok && bytes[b] == kGuard;
  return out;
}

int32_t Ramp(size_t i) { return static_cast<int32_t>(i * 7 + 3); }

TEST_CASE("a message of several steps: each step its share, later steps staged while a host part runs",
          "[device_path][pipeline]") {
  Rig rig;
  const size_t per_step = 250;  // 1000 bytes of int32
  const size_t count = 10 * per_step + 37;  // 10 full steps and a short last one
  std::vector<int32_t> input;
  auto buffer = Filled(rig, count, Ramp, &input);
  CollectiveArgs args;
  args.kind = Collective::kAllReduce;
  args.sendbuf = args.recvbuf = buffer->data();
  args.count = count;
  args.type = DataType::kInt32;
  // Touched on the progress thread only, read after WaitIdle.
  std::vector<size_t> counts;
  std::vector<std::string> problems;
  const uint32_t first = rig.queue->StagedThrough() + 1;  // 1 on a fresh queue
  StagedOp op = StageCollective(args, 0, 1, 1000, [&](const CollectiveArgs& host) -> Status {
    const size_t j = counts.size();
    counts.push_back(host.count);
    if (host.sendbuf != host.recvbuf) problems.push_back("step " + std::to_string(j) + " is not in place on its slot");
    if (j + 1 < 11) {
      // Step j + 1 must get staged while this host part is still running.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      const uint32_t want = first + static_cast<uint32_t>(j) + 1;
      while (static_cast<int32_t>(rig.queue->StagedThrough() - want) < 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (static_cast<int32_t>(rig.queue->StagedThrough() - want) < 0) {
        problems.push_back("step " + std::to_string(j + 1) + " was not staged while step " + std::to_string(j) +
                           "'s host part ran");
      }
    }
    auto* v = static_cast<int32_t*>(host.recvbuf);
    for (size_t i = 0; i < host.count; ++i) v[i] = v[i] * 2 + 1;
    return Status::Ok();
  });
  REQUIRE(op.steps.size() == 11);
  REQUIRE(op.staging_bytes == 1000);
  REQUIRE(rig.queue->Enqueue(std::move(op), rig.stream->native()).ok());
  bool guard_ok = false;
  const std::vector<int32_t> out = Contents(rig, *buffer, count, &guard_ok);
  REQUIRE(rig.queue->WaitIdle(Deadline::AfterMs(10000)).ok());
  INFO((problems.empty() ? std::string() : problems.front()));
  CHECK(problems.empty());
  CHECK(rig.failures.seen.empty());
  CHECK(guard_ok);
  REQUIRE(counts.size() == 11);
  for (size_t j = 0; j < 10; ++j) CHECK(counts[j] == per_step);
  CHECK(counts[10] == 37);
  size_t wrong = 0, first_wrong = count;
  for (size_t i = 0; i < count; ++i) {
    if (out[i] != input[i] * 2 + 1) {
      ++wrong;
      first_wrong = std::min(first_wrong, i);
    }
  }
  INFO("first wrong element " << first_wrong);
  CHECK(wrong == 0);
  // Twice more on the same queue: slots come back from the first operation, numbers go on.
  for (int again = 0; again < 2; ++again) {
    auto second = StageCollective(args, 0, 1, 1000, [&](const CollectiveArgs& host) -> Status {
      auto* v = static_cast<int32_t*>(host.recvbuf);
      for (size_t i = 0; i < host.count; ++i) v[i] -= 1;
      return Status::Ok();
    });
    REQUIRE(rig.queue->Enqueue(std::move(second), rig.stream->native()).ok());
  }
  const std::vector<int32_t> after = Contents(rig, *buffer, count, &guard_ok);
  wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += after[i] != input[i] * 2 - 1;
  CHECK(wrong == 0);
  CHECK(guard_ok);
}

// alltoall and reducescatter cut every per-rank block at the same element range: a host part
// standing for the collective (this rank 1 of 3, the others' data in closed form) checks the cut.
TEST_CASE("per-rank blocks are cut at the same element range in every block", "[device_path][pipeline]") {
  Rig rig;
  const int size = 3, rank = 1;
  const size_t count = 401;  // per block; 1000 bytes of staging hold 83 elements of each of 3 blocks
  std::vector<int32_t> input;
  auto send = Filled(rig, count * size, Ramp, &input);
  std::vector<int32_t> zeros;
  auto recv = Filled(rig, count * size, [](size_t) { return int32_t{0}; }, &zeros);
  CollectiveArgs args;
  args.count = count;
  args.type = DataType::kInt32;
  args.sendbuf = send->data();
  args.recvbuf = recv->data();
  SECTION("alltoall: out[p][g] = in[p][g] * 3 + p") {
    args.kind = Collective::kAllToAll;
    size_t steps_run = 0;
    StagedOp op = StageCollective(args, rank, size, 1000, [&](const CollectiveArgs& host) -> Status {
      ++steps_run;
      auto* in = static_cast<const int32_t*>(host.sendbuf);
      auto* out = static_cast<int32_t*>(host.recvbuf);
      for (size_t p = 0; p < 3; ++p) {
        for (size_t i = 0; i < host.count; ++i) out[p * host.count + i] = in[p * host.count + i] * 3 + static_cast<int32_t>(p);
      }
      return Status::Ok();
    });
    REQUIRE(op.steps.size() == 5);  // 4 x 83 + 69
    REQUIRE(rig.queue->Enqueue(std::move(op), rig.stream->native()).ok());
    bool guard_ok = false;
    const std::vector<int32_t> out = Contents(rig, *recv, count * size, &guard_ok);
    REQUIRE(rig.queue->WaitIdle(Deadline::AfterMs(10000)).ok());
    CHECK(steps_run == 5);
    size_t wrong = 0;
    for (size_t p = 0; p < 3; ++p) {
      for (size_t g = 0; g < count; ++g) wrong += out[p * count + g] != input[p * count + g] * 3 + static_cast<int32_t>(p);
    }
    CHECK(wrong == 0);
    CHECK(guard_ok);
  }
  SECTION("reducescatter: out[g] = sum over p of in[p][g], this rank's block of the slot") {
    args.kind = Collective::kReduceScatter;
    StagedOp op = StageCollective(args, rank, size, 1000, [&](const CollectiveArgs& host) -> Status {
      auto* in = static_cast<const int32_t*>(host.sendbuf);
      auto* out = static_cast<int32_t*>(host.recvbuf);
      if (reinterpret_cast<const char*>(out) != reinterpret_cast<const char*>(in) + rank * host.count * 4) {
        return Status::Internal("recvbuf is not this rank's block of the slot");
      }
      std::vector<int32_t> sum(host.count, 0);
      for (size_t p = 0; p < 3; ++p) {
        for (size_t i = 0; i < host.count; ++i) sum[i] += in[p * host.count + i];
      }
      std::memcpy(out, sum.data(), host.count * 4);
      return Status::Ok();
    });
    REQUIRE(op.steps.size() == 5);
    REQUIRE(rig.queue->Enqueue(std::move(op), rig.stream->native()).ok());
    bool guard_ok = false;
    const std::vector<int32_t> out = Contents(rig, *recv, count * size, &guard_ok);
    REQUIRE(rig.queue->WaitIdle(Deadline::AfterMs(10000)).ok());
    CHECK(rig.failures.seen.empty());
    size_t wrong = 0;
    for (size_t g = 0; g < count; ++g) wrong += out[g] != input[g] + input[count + g] + input[2 * count + g];
    for (size_t g = count; g < 3 * count; ++g) wrong += out[g] != 0;  // only count elements come back
    CHECK(wrong == 0);
    CHECK(guard_ok);
  }
}

TEST_CASE("chunk size 0, or a message within one chunk, stages the whole message in one step",
          "[device_path][pipeline]") {
  int dummy[8] = {};
  CollectiveArgs args;
  args.kind = Collective::kAllGather;
  args.sendbuf = dummy;
  args.recvbuf = dummy;
  args.count = 2;
  args.type = DataType::kInt32;
  auto none = [](const CollectiveArgs&) { return Status::Ok(); };
  StagedOp whole = StageCollective(args, 0, 4, 0, none);
  CHECK(whole.steps.size() == 1);
  CHECK(whole.staging_bytes == 32);
  REQUIRE(whole.steps[0].copy_in.size() == 1);  // the 4 blocks' shares merged into one copy
  CHECK(whole.steps[0].copy_in[0].bytes == 32);
  CHECK(StageCollective(args, 0, 4, 32, none).steps.size() == 1);
  CHECK(StageCollective(args, 0, 4, 31, none).steps.size() == 2);  // 1 element of each block per step
}

TEST_CASE("a host part that fails skips the operation's later steps and still releases the stream",
          "[device_path][pipeline]") {
  Rig rig;
  std::vector<int32_t> input;
  auto buffer = Filled(rig, 6 * 250, Ramp, &input);
  CollectiveArgs args;
  args.kind = Collective::kAllReduce;
  args.sendbuf = args.recvbuf = buffer->data();
  args.count = 6 * 250;
  args.type = DataType::kInt32;
  size_t ran = 0;
  StagedOp op = StageCollective(args, 0, 1, 1000, [&](const CollectiveArgs&) -> Status {
    return ++ran == 3 ? Status::RemoteError("rank 0: step 3 lost its peer") : Status::Ok();
  });
  REQUIRE(op.steps.size() == 6);
  REQUIRE(rig.queue->Enqueue(std::move(op), rig.stream->native()).ok());
  CHECK(rig.stream->Synchronize(Deadline::AfterMs(10000)).ok());
  REQUIRE(rig.queue->WaitIdle(Deadline::AfterMs(10000)).ok());
  CHECK(ran == 3);
  std::lock_guard<std::mutex> lock(rig.failures.mu);
  REQUIRE(rig.failures.seen.size() == 1);
  CHECK(rig.failures.seen[0].find("step 3 lost its peer") != std::string::npos);
}

}  // namespace
}  // namespace braid::device_path
