#include "transport/fault_injection.h"

#include <mutex>
#include <string>
#include <utility>

namespace braid::transport {
namespace {

std::mutex decorator_mutex;  // guards decorator
ConnectionDecorator decorator;

}  // namespace

void SetConnectionDecoratorForTesting(ConnectionDecorator new_decorator) {
  std::lock_guard<std::mutex> lock(decorator_mutex);
  decorator = std::move(new_decorator);
}

ConnectionDecorator CurrentConnectionDecorator() {
  std::lock_guard<std::mutex> lock(decorator_mutex);
  return decorator;
}

DroppingConnection::DroppingConnection(std::unique_ptr<Connection> inner, int self_rank,
                                       int posts_before_drop)
    : inner_(std::move(inner)), self_rank_(self_rank), posts_before_drop_(posts_before_drop) {}

void DroppingConnection::MaybeDrop() {
  if (posts_.fetch_add(1) == posts_before_drop_) {
    inner_->Close(Status::RemoteError("rank " + std::to_string(self_rank_) + ": link to rank " +
                                      std::to_string(inner_->peer()) +
                                      " dropped (injected fault)"));
  }
}

RequestPtr DroppingConnection::PostSend(const void* data, size_t bytes, uint64_t tag) {
  MaybeDrop();
  return inner_->PostSend(data, bytes, tag);
}

RequestPtr DroppingConnection::PostRecv(void* data, size_t bytes, uint64_t tag) {
  MaybeDrop();
  return inner_->PostRecv(data, bytes, tag);
}

RequestPtr DroppingConnection::PostRecvInto(size_t bytes, uint64_t tag,
                                            std::shared_ptr<LandingSink> sink) {
  MaybeDrop();
  return inner_->PostRecvInto(bytes, tag, std::move(sink));
}

Status DroppingConnection::SendRecv(const void* send, size_t send_bytes, void* recv,
                                    size_t recv_bytes, uint64_t tag, Deadline deadline,
                                    Half* failed) {
  if (send_bytes > 0) MaybeDrop();
  if (recv_bytes > 0) MaybeDrop();
  return inner_->SendRecv(send, send_bytes, recv, recv_bytes, tag, deadline, failed);
}

}  // namespace braid::transport
