#include "device_streams.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace braid_torch {

CallDevice& CallDevice::Add(const at::Tensor& tensor, const std::string& what) {
  if (!tensor.defined()) return *this;  // refused elsewhere, naming it
  const c10::Device device = tensor.device();
  TORCH_CHECK(device.is_cpu() || device.is_cuda(), "braid ", op_, ": ", what, " is on ",
              device.str(), "; braid moves CPU and CUDA tensors");
  if (!device_.has_value()) {
    device_ = device;
    first_ = what;
    return *this;
  }
  TORCH_CHECK(*device_ == device, "braid ", op_, ": ", first_, " is on ", device_->str(),
              " but ", what, " is on ", device.str(),
              "; all tensors of one call must be on one device (all CPU, or all on the same GPU)");
  return *this;
}

CallDevice& CallDevice::Add(const std::vector<at::Tensor>& tensors, const std::string& what) {
  for (size_t i = 0; i < tensors.size(); ++i) Add(tensors[i], what + "[" + std::to_string(i) + "]");
  return *this;
}

c10::Stream GroupStreams::For(c10::Device device) {
  TORCH_CHECK(device.is_cuda() && device.has_index(), "braid: no group stream for ", device.str());
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = streams_.find(device.index());
  if (it == streams_.end()) {
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    it = streams_.emplace(device.index(), impl.getStreamFromGlobalPool(device, false)).first;
  }
  return it->second;
}

c10::Stream GroupStreams::Join(c10::Device device, const std::vector<at::Tensor>& tensors) {
  c10::Stream stream = For(device);
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  c10::Event ready(c10::DeviceType::CUDA);
  ready.record(impl.getStream(device));  // the caller's current stream on that device
  ready.block(stream);
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.has_storage()) impl.recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
  return stream;
}

}  // namespace braid_torch
