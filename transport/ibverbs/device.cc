#include "transport/ibverbs/device.h"

#include <cerrno>
#include <cstring>
#include <vector>

namespace braid::transport::ibverbs {
namespace {

std::string Errno(int error) { return error == 0 ? "unknown error" : std::strerror(error); }

// Frees the list from ibv_get_device_list on every path.
struct DeviceList {
  const VerbsApi& api;
  ibv_device** list = nullptr;
  int count = 0;
  ~DeviceList() {
    if (list != nullptr) api.free_device_list(list);
  }
};

}  // namespace

Result<std::unique_ptr<VerbsDevice>> VerbsDevice::Open(const VerbsApi& api, const IbConfig& config,
                                                       std::string* why_none) {
  DeviceList devices{api};
  errno = 0;
  devices.list = api.get_device_list(&devices.count);
  if (devices.list == nullptr || devices.count == 0) {
    *why_none = std::string("no RDMA device (") + api.source + " lists none" +
                (errno != 0 ? ": " + Errno(errno) : "") + ")";
    return std::unique_ptr<VerbsDevice>();
  }
  std::string seen;
  for (int d = 0; d < devices.count; ++d) {
    const std::string name = api.get_device_name(devices.list[d]);
    // A device this process cannot open or query (permissions, a container without its
    // /dev/infiniband node) is as good as absent: it is named in why_none and skipped.
    ibv_context* context = api.open_device(devices.list[d]);
    if (context == nullptr) {
      seen += (seen.empty() ? "" : ", ") + name + " (cannot be opened: " + Errno(errno) + ")";
      continue;
    }
    std::unique_ptr<VerbsDevice> device(new VerbsDevice(api));
    device->context_ = context;  // closed by the destructor from here on
    device->name_ = name;
    ibv_device_attr device_attr{};
    if (api.query_device(context, &device_attr) != 0) {
      seen += (seen.empty() ? "" : ", ") + name + " (cannot be queried: " + Errno(errno) + ")";
      continue;
    }
    for (int port = 1; port <= device_attr.phys_port_cnt; ++port) {  // ports count from 1
      ibv_port_attr attr{};
      if (api.query_port(context, static_cast<uint8_t>(port), &attr) != 0) {
        seen += (seen.empty() ? "" : ", ") + name + ":" + std::to_string(port) +
                " (cannot be queried: " + Errno(errno) + ")";
        continue;
      }
      seen += (seen.empty() ? "" : ", ") + name + ":" + std::to_string(port) +
              (attr.state == IBV_PORT_ACTIVE ? "" : " (not active)");
      if (attr.state != IBV_PORT_ACTIVE || !config.hca.Selects(name, port)) continue;
      device->port_ = static_cast<uint8_t>(port);
      device->port_attr_ = attr;
      device->gid_index_ = config.gid_index;
      if (api.query_gid(context, device->port_, config.gid_index, &device->gid_) != 0) {
        return Status::SystemError("RDMA device " + device->Describe() + " has no GID at index " +
                                   std::to_string(config.gid_index) +
                                   " (BRAID_IB_GID_INDEX): " + Errno(errno));
      }
      device->pd_ = api.alloc_pd(context);
      if (device->pd_ == nullptr) {
        return Status::SystemError("allocating a protection domain on " + device->Describe() +
                                   ": " + Errno(errno));
      }
      return device;
    }
  }
  *why_none = "no usable active RDMA port selected by BRAID_IB_HCA (seen: " + seen + ")";
  return std::unique_ptr<VerbsDevice>();
}

VerbsDevice::~VerbsDevice() {
  if (pd_ != nullptr) api_.dealloc_pd(pd_);
  if (context_ != nullptr) api_.close_device(context_);
}

}  // namespace braid::transport::ibverbs
