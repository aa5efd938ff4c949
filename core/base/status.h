// Status and Result<T>: braid's error model inside the library.
//
// Why values and not exceptions: every failure must travel up through transports, algorithms
// and the communicator to the C API, gaining context (rank, peer, op, sequence number) on the
// way, and no exception may cross the C boundary. Codes are one-to-one with braidResult_t so
// the boundary conversion is a cast.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace braid {

// Values equal braidResult_t's (bindings/c/braid.h); a static_assert there keeps them in step.
enum class Code : int {
  kOk = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
  kTimeout = 8,
  kAborted = 9,
};

const char* CodeName(Code code);

// Why the message sits behind a pointer: a Status is made, moved and dropped many times on every
// operation's path (each wait, each layer's return), nearly always OK. An OK status is then a
// code and a null pointer, so those moves and destructions are a few inline instructions; with a
// std::string member each was an out-of-line string move or destruction (~45 instructions per
// move in the per-call profile of an 8-byte allreduce). The message is immutable and shared
// between copies, so copying an error costs a reference count, not a string copy.
// Why a reference count of its own rather than a std::shared_ptr: GCC kept shared_ptr's
// destructor out of line, so every OK Status dropped (one per BRAID_RETURN_IF_ERROR) was a call;
// here the destructor is one inline test of the pointer.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message);
  Status(const Status& other) : code_(other.code_), message_(other.message_) {
    if (message_ != nullptr) Ref(message_);
  }
  Status(Status&& other) noexcept : code_(other.code_), message_(other.message_) {
    other.message_ = nullptr;
  }
  Status& operator=(const Status& other) {
    if (other.message_ != nullptr) Ref(other.message_);
    if (message_ != nullptr) Unref(message_);
    code_ = other.code_;
    message_ = other.message_;
    return *this;
  }
  Status& operator=(Status&& other) noexcept {
    if (this != &other) {
      if (message_ != nullptr) Unref(message_);
      code_ = other.code_;
      message_ = other.message_;
      other.message_ = nullptr;
    }
    return *this;
  }
  ~Status() {
    if (message_ != nullptr) Unref(message_);
  }

  static Status Ok() { return Status(); }
  static Status SystemError(std::string m) { return {Code::kSystemError, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternalError, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status InvalidUsage(std::string m) { return {Code::kInvalidUsage, std::move(m)}; }
  static Status RemoteError(std::string m) { return {Code::kRemoteError, std::move(m)}; }
  static Status Timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const;

  // Returns this status with `context` prepended ("context: message"); OK stays OK.
  Status WithContext(const std::string& context) const;
  std::string ToString() const;

 private:
  struct Message;  // the text and its reference count (status.cc)
  static void Ref(Message* message);
  static void Unref(Message* message);  // deletes it with the last reference

  Code code_ = Code::kOk;
  Message* message_ = nullptr;  // null for an empty message
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit on purpose
    if (status_.ok()) status_ = Status::Internal("Result constructed from an OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& value() const& { return *value_; }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace braid

#define BRAID_STATUS_CONCAT_INNER(a, b) a##b
#define BRAID_STATUS_CONCAT(a, b) BRAID_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if it is not OK.
#define BRAID_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::braid::Status braid_status_ = (expr);          \
    if (!braid_status_.ok()) return braid_status_;   \
  } while (0)

// Evaluates a Result<T>; on error returns its status, else moves the value into `lhs`.
#define BRAID_ASSIGN_OR_RETURN(lhs, expr) \
  BRAID_ASSIGN_OR_RETURN_IMPL(BRAID_STATUS_CONCAT(braid_result_, __LINE__), lhs, expr)
#define BRAID_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
