// braidCommRegister through the C API in a process whose device is the CPU SIMULATION of the
// device seam (core/device_path/simulated_for_tests.h; not a GPU): the C API asks the process
// device, so a buffer in its memory is exported (that the handle names the buffer is checked by a
// second process in comm_register_test), a range past its allocation is braidInvalidArgument
// naming it, and host memory in the same process registers as a recorded range.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "core/device_path/simulated_for_tests.h"

namespace {

TEST_CASE("braidCommRegister with the simulated process device: device buffers are exported, ranges checked",
          "[register][simulation]") {
  braid::device::Device* device = braid::device_path::UseSimulatedDeviceForTesting();
  REQUIRE(device != nullptr);
  REQUIRE(device->IsSimulation());
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  braidComm_t comm = nullptr;
  REQUIRE(braidCommInitRank(&comm, 1, id, 0) == braidSuccess);
  auto memory = device->Allocate(8192);
  REQUIRE(memory.ok());
  auto* base = static_cast<uint8_t*>(memory.value()->data());

  void* handle = nullptr;
  REQUIRE(braidCommRegister(comm, base + 512, 1024, &handle) == braidSuccess);
  CHECK(handle != nullptr);
  void* past = reinterpret_cast<void*>(0x1);
  CHECK(braidCommRegister(comm, base + 8000, 1000, &past) == braidInvalidArgument);
  CHECK(std::string(braidGetLastError(comm)).find("run past the end") != std::string::npos);
  CHECK(past == nullptr);
  std::vector<uint8_t> host(256);
  void* host_handle = nullptr;
  CHECK(braidCommRegister(comm, host.data(), host.size(), &host_handle) == braidSuccess);
  CHECK(braidCommDeregister(comm, host_handle) == braidSuccess);
  CHECK(braidCommDeregister(comm, handle) == braidSuccess);
  CHECK(braidCommDeregister(comm, handle) == braidInvalidArgument);
  REQUIRE(braidCommDestroy(comm) == braidSuccess);
}

}  // namespace
