// Where a process may not share device memory by descriptor (a driver without it, a sandbox
// refusing the export), device::ProbeShareable says why, once per device, and the cuda_ipc
// transport is then not available (Create gives none), so a communicator's device work stays on
// the host transports instead of failing at its first link. The refusing device here wraps the
// CPU SIMULATION of the device seam and refuses ExportFd, as such a sandbox would.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "core/device/shareable_probe.h"
#include "core/device/simulated_device.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"

namespace braid::transport {
namespace {

// The simulation, except that exporting shareable memory is refused (counted).
class RefusingExportDevice : public device::Device {
 public:
  std::string Describe() const override { return "simulated device refusing descriptor export (a test)"; }
  bool IsSimulation() const override { return true; }
  int Ordinal() const override { return 0; }
  Result<std::unique_ptr<device::Stream>> NewStream() override { return sim_->NewStream(); }
  Result<std::unique_ptr<device::Event>> NewEvent() override { return sim_->NewEvent(); }
  Result<std::unique_ptr<device::Memory>> Allocate(size_t bytes) override { return sim_->Allocate(bytes); }
  Result<std::unique_ptr<device::Memory>> AllocateHost(size_t bytes) override { return sim_->AllocateHost(bytes); }
  Result<std::unique_ptr<device::Memory>> RegisterHost(void* ptr, size_t bytes) override {
    return sim_->RegisterHost(ptr, bytes);
  }
  Result<device::IpcHandle> Export(const device::Memory& memory) override { return sim_->Export(memory); }
  Result<std::unique_ptr<device::Memory>> Import(const device::IpcHandle& handle) override {
    return sim_->Import(handle);
  }
  Result<std::unique_ptr<device::Memory>> AllocateShareable(size_t bytes) override {
    return sim_->AllocateShareable(bytes);
  }
  Result<int> ExportFd(const device::Memory&) override {
    ++exports_tried;
    return Status::SystemError("CUDA driver: cuMemExportToShareableHandle failed with CUresult 801 (as a sandbox)");
  }
  std::atomic<int> exports_tried{0};

 private:
  std::unique_ptr<device::Device> sim_ = device::NewSimulatedDevice();
};

TEST_CASE("the probe says why descriptor sharing is refused, and asks the device once", "[cuda_ipc][sim]") {
  RefusingExportDevice refusing;
  Status first = device::ProbeShareable(refusing);
  CHECK_FALSE(first.ok());
  CHECK_THAT(first.ToString(), Catch::Contains("exporting shareable memory of simulated device refusing") &&
                                   Catch::Contains("cuMemExportToShareableHandle"));
  CHECK_FALSE(device::ProbeShareable(refusing).ok());
  CHECK(refusing.exports_tried == 1);

  std::unique_ptr<device::Device> sim = device::NewSimulatedDevice();
  CHECK(device::ProbeShareable(*sim).ok());
}

TEST_CASE("no cuda_ipc transport where the device cannot share memory by descriptor", "[cuda_ipc][sim]") {
  auto refusing = std::make_shared<RefusingExportDevice>();
  TransportContext context;
  context.rank = 0;
  context.size = 2;
  context.comm_id = 77;
  context.secret = "cuda-ipc-unshareable-test";
  context.device = refusing;
  auto created = cuda_ipc::CudaIpcTransport::Create(context);
  REQUIRE(created.ok());
  CHECK(created.value() == nullptr);

  // The same context on the plain simulation gets one: the refusal is what made the difference.
  context.device = device::NewSimulatedDevice();
  auto made = cuda_ipc::CudaIpcTransport::Create(context);
  REQUIRE(made.ok());
  CHECK(made.value() != nullptr);
}

}  // namespace
}  // namespace braid::transport
