// The CPU SIMULATION of the device seam (core/device/simulated_device.h) against the seam's
// contract (device_conformance.h, the same checks tests/gpu/device_gpu_test runs on CUDA), plus
// what only processes can show: memory exported by one process and imported by another, and
// streams of two processes ordered by a flag in shared memory.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "core/device/simulated_device.h"
#include "tests/core/device/device_conformance.h"

namespace braid::device {
namespace {

TEST_CASE("the simulated device says it is a simulation", "[device]") {
  auto device = NewSimulatedDevice();
  CHECK(device->IsSimulation());
  CHECK(device->Describe().find("simulated") != std::string::npos);
  CHECK(device->Describe().find("not a GPU") != std::string::npos);
}

TEST_CASE("the simulated device keeps the device seam's contract", "[device]") {
  auto device = NewSimulatedDevice();
  for (const auto& [name, check] : conformance::AllChecks()) {
    INFO(name);
    CHECK(check(*device) == "");
  }
}

TEST_CASE("destroying a simulated stream held by a flag nobody writes does not hang", "[device]") {
  auto device = NewSimulatedDevice();
  auto flags = device->AllocateHost(64);
  REQUIRE(flags.ok());
  const auto start = std::chrono::steady_clock::now();
  {
    auto stream = device->NewStream();
    REQUIRE(stream.ok());
    REQUIRE((*stream)->WaitValue32(static_cast<uint32_t*>((*flags)->data()), 1).ok());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 5);
}

// The parent exports device memory and shares a flag segment; the child (its own process, its own
// simulated device) imports the memory, fills it from its stream and then raises the flag from
// the same stream; the parent's stream waits on the flag before copying the memory out. The
// parent never waits on the host: only stream ordering makes the data arrive.
TEST_CASE("simulated streams of two processes order each other through shared memory", "[device]") {
  constexpr size_t kBytes = 1 << 16;
  auto device = NewSimulatedDevice();
  auto memory = device->Allocate(kBytes);
  REQUIRE(memory.ok());
  auto handle = device->Export(**memory);
  REQUIRE(handle.ok());
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  // Unmapped last, after the stream below is gone: a stream still waiting on the flag (the child
  // failed) must not poll unmapped memory.
  struct Unmap {
    void* p;
    ~Unmap() { munmap(p, 4096); }
  } unmap{shared};
  auto flags = device->RegisterHost(shared, 4096);
  REQUIRE(flags.ok());
  auto* ready = static_cast<uint32_t*>(shared);
  auto result = device->AllocateHost(kBytes);
  REQUIRE(result.ok());
  auto stream = device->NewStream();
  REQUIRE(stream.ok());
  REQUIRE((*stream)->WaitValue32(ready, 1).ok());
  REQUIRE((*stream)->Copy((*result)->data(), (*memory)->data(), kBytes).ok());

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Only async-signal-safe-ish work and _exit: no Catch2 here.
    auto child_device = NewSimulatedDevice();
    auto imported = child_device->Import(*handle);
    if (!imported.ok()) _exit(10);
    auto source = child_device->AllocateHost(kBytes);
    if (!source.ok()) _exit(11);
    auto* bytes = static_cast<uint8_t*>((*source)->data());
    for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 5);
    auto child_stream = child_device->NewStream();
    if (!child_stream.ok()) _exit(12);
    if (!(*child_stream)->Copy((*imported)->data(), bytes, kBytes).ok()) _exit(13);
    if (!(*child_stream)->WriteValue32(ready, 1).ok()) _exit(14);
    if (!(*child_stream)->Synchronize(Deadline::AfterMs(10000)).ok()) _exit(15);
    _exit(0);
  }
  const Status synced = (*stream)->Synchronize(Deadline::AfterMs(20000));
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  REQUIRE(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  CHECK(synced.ok());
  const auto* got = static_cast<const uint8_t*>((*result)->data());
  size_t wrong = 0;
  for (size_t i = 0; i < kBytes; ++i) wrong += got[i] != static_cast<uint8_t>(i * 13 + 5);
  CHECK(wrong == 0);
}

TEST_CASE("a simulated IPC handle that is not one is refused", "[device]") {
  auto device = NewSimulatedDevice();
  IpcHandle garbage;
  std::memset(garbage.bytes, 0xAB, sizeof(garbage.bytes));
  garbage.size = 4096;
  const auto imported = device->Import(garbage);
  REQUIRE_FALSE(imported.ok());
  CHECK(imported.status().code() == Code::kInvalidArgument);
  auto host = device->AllocateHost(64);
  REQUIRE(host.ok());
  CHECK(device->Export(**host).status().code() == Code::kInvalidArgument);  // only Allocate's memory
}

}  // namespace
}  // namespace braid::device
