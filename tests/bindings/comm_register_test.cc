// braidCommRegister / braidCommDeregister (bindings/c/braid.h) and the registrations behind them
// (bindings/c/registrations.h).
// - Through the C API in a process without a device (this binary links no device): every bad
//   argument is braidInvalidArgument naming it, handles deregister once, a foreign or stale handle
//   is refused, and host buffers register as recorded ranges.
// - The registrations' export cache on the CPU SIMULATION of the device seam (not a GPU): buffers
//   inside one allocation share one export, each with its own offset; a range past its allocation
//   or memory that is no allocation is refused; after the last deregistration the allocation is
//   exported afresh. Independently of the cache, a forked process imports the handle and reads
//   the registered buffer at the recorded offset.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "bindings/c/registrations.h"
#include "core/device/simulated_device.h"

namespace {

using braid::Code;

braidComm_t OneRankComm() {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  braidComm_t comm = nullptr;
  REQUIRE(braidCommInitRank(&comm, 1, id, 0) == braidSuccess);
  return comm;
}

bool Says(braidComm_t comm, const std::string& part) {
  return std::string(braidGetLastError(comm)).find(part) != std::string::npos;
}

TEST_CASE("braidCommRegister / braidCommDeregister: arguments and handles (no device: host ranges)",
          "[register]") {
  braidComm_t comm = OneRankComm();
  braidComm_t other = OneRankComm();
  std::vector<char> buffer(4096);
  void* handle = reinterpret_cast<void*>(0x1);

  CHECK(braidCommRegister(nullptr, buffer.data(), buffer.size(), &handle) == braidInvalidArgument);
  CHECK(braidCommRegister(comm, nullptr, buffer.size(), &handle) == braidInvalidArgument);
  CHECK(Says(comm, "buff is NULL"));
  CHECK(handle == nullptr);  // cleared on failure
  CHECK(braidCommRegister(comm, buffer.data(), 0, &handle) == braidInvalidArgument);
  CHECK(Says(comm, "size is 0"));
  CHECK(braidCommRegister(comm, buffer.data(), buffer.size(), nullptr) == braidInvalidArgument);
  CHECK(Says(comm, "handle is NULL"));
  CHECK(braidCommDeregister(comm, nullptr) == braidInvalidArgument);
  // Nothing registered yet: any handle is foreign.
  int not_a_handle = 0;
  CHECK(braidCommDeregister(comm, &not_a_handle) == braidInvalidArgument);

  void* first = nullptr;
  void* second = nullptr;
  REQUIRE(braidCommRegister(comm, buffer.data(), buffer.size(), &first) == braidSuccess);
  REQUIRE(braidCommRegister(comm, buffer.data() + 100, 10, &second) == braidSuccess);
  CHECK(first != nullptr);
  CHECK(second != nullptr);
  CHECK(first != second);
  // Another communicator's handle is foreign here, and the other way round.
  void* theirs = nullptr;
  REQUIRE(braidCommRegister(other, buffer.data(), buffer.size(), &theirs) == braidSuccess);
  CHECK(braidCommDeregister(comm, theirs) == braidInvalidArgument);
  CHECK(Says(comm, "not a live registration of this communicator"));
  CHECK(braidCommDeregister(other, first) == braidInvalidArgument);
  CHECK(braidCommDeregister(comm, &not_a_handle) == braidInvalidArgument);
  // Each handle once.
  CHECK(braidCommDeregister(comm, first) == braidSuccess);
  CHECK(braidCommDeregister(comm, first) == braidInvalidArgument);
  CHECK(Says(comm, "deregistered already"));
  CHECK(braidCommDeregister(comm, second) == braidSuccess);
  CHECK(braidCommDeregister(other, theirs) == braidSuccess);

  REQUIRE(braidCommDestroy(comm) == braidSuccess);
  // A destroyed communicator is a misuse.
  CHECK(braidCommRegister(comm, buffer.data(), buffer.size(), &handle) == braidInvalidUsage);
  CHECK(braidCommDeregister(comm, theirs) == braidInvalidUsage);
  REQUIRE(braidCommDestroy(other) == braidSuccess);
}

// Reads `bytes` at `offset` of the allocation `handle` names, in a forked process (the simulation,
// like CUDA, refuses imports in the exporting process), and compares them with `expected`.
std::string ReadThroughHandleInChild(braid::device::Device& device, const braid::device::IpcHandle& handle,
                                     uint64_t offset, const std::vector<uint8_t>& expected) {
  const pid_t child = fork();
  if (child == 0) {
    auto imported = braid::device::NewSimulatedDevice()->Import(handle);
    if (!imported.ok()) _exit(2);
    const auto* data = static_cast<const uint8_t*>(imported.value()->data()) + offset;
    _exit(std::memcmp(data, expected.data(), expected.size()) == 0 ? 0 : 3);
  }
  (void)device;
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status)) return "the child did not exit";
  if (WEXITSTATUS(status) == 2) return "the child could not import the handle";
  if (WEXITSTATUS(status) == 3) return "the child read other bytes at the offset";
  return WEXITSTATUS(status) == 0 ? "" : "the child failed";
}

TEST_CASE("registrations on the simulated device: one export per allocation, offsets, refusals",
          "[register][simulation]") {
  std::unique_ptr<braid::device::Device> device = braid::device::NewSimulatedDevice();
  auto a = device->Allocate(1 << 20);
  auto b = device->Allocate(4096);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto* base_a = static_cast<uint8_t*>(a.value()->data());
  auto* base_b = static_cast<uint8_t*>(b.value()->data());
  for (size_t i = 0; i < (1 << 20); ++i) base_a[i] = static_cast<uint8_t>(i * 7 + 3);
  braid::capi::Registrations registrations;

  auto whole = registrations.Register(device.get(), base_a, 1 << 20);
  auto slice = registrations.Register(device.get(), base_a + 5000, 3000);
  auto tail = registrations.Register(device.get(), base_a + (1 << 20) - 1, 1);
  REQUIRE(whole.ok());
  REQUIRE(slice.ok());
  REQUIRE(tail.ok());
  CHECK(registrations.exports() == 1);  // three buffers, one allocation: exported once
  auto entry = registrations.Lookup(slice.value());
  REQUIRE(entry.ok());
  CHECK(entry.value().exported);
  CHECK(entry.value().base == base_a);
  CHECK(entry.value().offset == 5000);
  CHECK(entry.value().handle.size == (1u << 20));
  // The handle really names the buffer: another process reads it at the offset.
  const std::vector<uint8_t> expected(base_a + 5000, base_a + 8000);
  CHECK(ReadThroughHandleInChild(*device, entry.value().handle, entry.value().offset, expected) == "");

  auto other = registrations.Register(device.get(), base_b + 16, 100);
  REQUIRE(other.ok());
  CHECK(registrations.exports() == 2);

  // Past the end of its allocation, and memory that is no allocation at all.
  auto past = registrations.Register(device.get(), base_b + 4000, 200);
  CHECK(past.status().code() == Code::kInvalidArgument);
  CHECK(past.status().message().find("run past the end") != std::string::npos);
  std::vector<uint8_t> host(64);
  auto not_device = registrations.Register(device.get(), host.data(), host.size());
  CHECK(not_device.status().code() == Code::kInvalidArgument);
  CHECK(registrations.live() == 4);

  // The cache lives while a registration uses it: after the last one of allocation a goes, a
  // new registration there exports again.
  REQUIRE(registrations.Deregister(whole.value()).ok());
  REQUIRE(registrations.Deregister(slice.value()).ok());
  auto again = registrations.Register(device.get(), base_a, 10);
  CHECK(registrations.exports() == 2);  // `tail` still holds the export
  REQUIRE(registrations.Deregister(tail.value()).ok());
  REQUIRE(registrations.Deregister(again.value()).ok());
  auto fresh = registrations.Register(device.get(), base_a, 10);
  REQUIRE(fresh.ok());
  CHECK(registrations.exports() == 3);
  CHECK(registrations.Deregister(fresh.value()).ok());
  CHECK(registrations.Deregister(fresh.value()).code() == Code::kInvalidArgument);
  CHECK(registrations.Deregister(other.value()).ok());
  CHECK(registrations.live() == 0);
}

}  // namespace
