#include "core/device_path/stream_join.h"

#include <string>

namespace braid::device_path {

Status StreamJoin::Reserve(size_t count) {
  while (joined_.size() < count) {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> joined, device_->NewEvent());
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> released, device_->NewEvent());
    joined_.push_back(std::move(joined));
    released_.push_back(std::move(released));
  }
  return Status::Ok();
}

Status StreamJoin::Join(const std::vector<void*>& streams) {
  if (streams.empty()) return Status::Internal("StreamJoin::Join without streams");
  BRAID_RETURN_IF_ERROR(Reserve(streams.size() - 1));
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> primary, device_->WrapStream(streams[0]));
  for (size_t i = 1; i < streams.size(); ++i) {
    auto other = device_->WrapStream(streams[i]);
    if (!other.ok()) return other.status().WithContext("stream " + std::to_string(i + 1) + " of the group");
    BRAID_RETURN_IF_ERROR(other.value()->Record(*joined_[i - 1]));
    BRAID_RETURN_IF_ERROR(primary->Wait(*joined_[i - 1]));
  }
  return Status::Ok();
}

Status StreamJoin::Release(const std::vector<void*>& streams) {
  if (streams.size() - 1 > released_.size()) return Status::Internal("StreamJoin::Release before Join");
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> primary, device_->WrapStream(streams[0]));
  for (size_t i = 1; i < streams.size(); ++i) {
    BRAID_RETURN_IF_ERROR(primary->Record(*released_[i - 1]));
    auto other = device_->WrapStream(streams[i]);
    if (!other.ok()) return other.status().WithContext("stream " + std::to_string(i + 1) + " of the group");
    BRAID_RETURN_IF_ERROR(other.value()->Wait(*released_[i - 1]));
  }
  return Status::Ok();
}

}  // namespace braid::device_path
