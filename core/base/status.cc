#include "core/base/status.h"

#include <atomic>

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

struct Status::Message {
  std::atomic<int> references{1};
  const std::string text;
};

Status::Status(Code code, std::string message)
    : code_(code), message_(new Message{{1}, std::move(message)}) {}

void Status::Ref(Message* message) { message->references.fetch_add(1, std::memory_order_relaxed); }

void Status::Unref(Message* message) {
  if (message->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete message;
}

const std::string& Status::message() const {
  static const std::string empty;
  return message_ != nullptr ? message_->text : empty;
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
