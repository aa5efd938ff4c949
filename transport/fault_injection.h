// A seam for tests to inject faults into links (STYLE: an Env/wrapper seam that tests decorate).
//
// The communicator passes every new Connection through the process-wide decorator, if one is set.
// DroppingConnection is the decorator the fault tests use: after a given number of posts it
// closes the underlying link as if the network had dropped it, so both ends see a lost peer.
// It forwards every Connection method to the link it wraps (shm's SendRecv, PostRecvInto and
// LandsInPlace included), so fault tests run the production data paths, not the defaults; a
// wrapper that hid one would test code that production never runs.
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
  bool LandsInPlace() const override { return inner_->LandsInPlace(); }
  // A post, counted as PostRecv is.
  RequestPtr PostRecvInto(size_t bytes, uint64_t tag, std::shared_ptr<LandingSink> sink) override;
  // Counts one post per non-empty half, as the default SendRecv's PostSend and PostRecv did.
  Status SendRecv(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                  uint64_t tag, Deadline deadline, Half* failed) override;
  // Not a post: forwarded without counting.
  Result<std::optional<Incoming>> Probe() override { return inner_->Probe(); }
  // Not posts either: a read moves nothing over the link (its messages are counted).
  bool ReadsPeerMemory() const override { return inner_->ReadsPeerMemory(); }
  Status ReadPeerMemory(uint64_t address, void* destination, size_t bytes) override {
    return inner_->ReadPeerMemory(address, destination, bytes);
  }

 private:
  void MaybeDrop();

  std::unique_ptr<Connection> inner_;
  const int self_rank_;
  const int posts_before_drop_;
  std::atomic<int> posts_{0};
};

}  // namespace braid::transport
