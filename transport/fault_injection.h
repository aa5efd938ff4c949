// A seam for tests to inject faults into links (STYLE: an Env/wrapper seam that tests decorate).
//
// The communicator passes every new Connection through the process-wide decorator, if one is set.
// DroppingConnection is the decorator the fault tests use: after a given number of posts it
// closes the underlying link as if the network had dropped it, so both ends see a lost peer.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "core/base/status.h"
#include "transport/connection.h"

namespace braid::transport {

using ConnectionDecorator = std::function<std::unique_ptr<Connection>(
    int self_rank, int peer, std::unique_ptr<Connection> connection)>;

// Test-only. Applies to connections made after the call; pass nullptr to remove.
void SetConnectionDecoratorForTesting(ConnectionDecorator decorator);
// The current decorator (empty if none). Thread-safe.
ConnectionDecorator CurrentConnectionDecorator();

class DroppingConnection : public Connection {
 public:
  // Posts beyond `posts_before_drop` close the link first (so they and everything pending fail).
  DroppingConnection(std::unique_ptr<Connection> inner, int self_rank, int posts_before_drop);

  int peer() const override { return inner_->peer(); }
  RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) override;
  RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) override;
  void Close(const Status& reason) override { inner_->Close(reason); }

 private:
  void MaybeDrop();

  std::unique_ptr<Connection> inner_;
  const int self_rank_;
  const int posts_before_drop_;
  std::atomic<int> posts_{0};
};

}  // namespace braid::transport
