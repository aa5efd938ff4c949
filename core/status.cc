#include "core/status.h"

namespace braid {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "success";
    case Code::kUnhandledCudaError: return "unhandled cuda error";
    case Code::kSystemError: return "system error";
    case Code::kInternalError: return "internal error";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kInvalidUsage: return "invalid usage";
    case Code::kRemoteError: return "remote error";
    case Code::kInProgress: return "in progress";
    case Code::kTimeout: return "timeout";
    case Code::kAborted: return "aborted";
  }
  return "unknown result code";
}

const std::string& Status::EmptyMessage() {
  static const std::string empty;
  return empty;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message());
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message();
}

}  // namespace braid
