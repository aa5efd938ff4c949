// VerbsDevice: the device port a verbs transport uses (chosen by BRAID_IB_HCA), opened with its
// protection domain, and what peers need to address it (LID, GID, link layer).
#pragma once

#include <memory>
#include <string>

#include "core/base/status.h"
#include "transport/ibverbs/ib_config.h"
#include "transport/ibverbs/verbs_api.h"

namespace braid::transport::ibverbs {

class VerbsDevice {
 public:
  // Opens the first active port, in device-list order then port order, that `config.hca`
  // selects, and allocates a protection domain on it. Returns null (not an error) when there is
  // no device, no active port, or BRAID_IB_HCA selects none of them; `*why_none` then says which,
  // naming the devices and ports seen (one that cannot be opened or queried is skipped, named
  // with the reason). Errors (kSystemError naming the port): the selected port has no GID at
  // BRAID_IB_GID_INDEX, or gives no protection domain.
  static Result<std::unique_ptr<VerbsDevice>> Open(const VerbsApi& api, const IbConfig& config,
                                                   std::string* why_none);
  ~VerbsDevice();
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  const VerbsApi& api() const { return api_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }
  uint8_t port() const { return port_; }
  const ibv_port_attr& port_attr() const { return port_attr_; }
  const ibv_gid& gid() const { return gid_; }
  int gid_index() const { return gid_index_; }
  // RoCE ports are addressed by GID only; InfiniBand ports by LID (and GID across subnets).
  bool is_ethernet() const { return port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET; }
  // "mlx5_0:1", for logs and errors.
  std::string Describe() const { return name_ + ":" + std::to_string(port_); }

 private:
  explicit VerbsDevice(const VerbsApi& api) : api_(api) {}
  const VerbsApi& api_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::string name_;
  uint8_t port_ = 0;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
  int gid_index_ = 0;
};

}  // namespace braid::transport::ibverbs
