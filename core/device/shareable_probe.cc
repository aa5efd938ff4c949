#include "core/device/shareable_probe.h"

#include <unistd.h>

#include <map>
#include <mutex>

namespace braid::device {

Status ProbeShareable(Device& device) {
  static std::mutex mu;
  static std::map<const Device*, Status>* answers = new std::map<const Device*, Status>();  // never freed: used at exit
  std::lock_guard<std::mutex> lock(mu);
  auto known = answers->find(&device);
  if (known != answers->end()) return known->second;
  Status answer = [&]() -> Status {
    auto memory = device.AllocateShareable(1);
    if (!memory.ok()) return memory.status().WithContext("allocating shareable memory on " + device.Describe());
    auto fd = device.ExportFd(*memory.value());
    if (!fd.ok()) return fd.status().WithContext("exporting shareable memory of " + device.Describe());
    ::close(fd.value());
    return Status::Ok();
  }();
  answers->emplace(&device, answer);
  return answer;
}

}  // namespace braid::device
