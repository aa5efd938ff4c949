// TcpStoreClient: a Store backed by a TcpStoreServer over one TCP connection.
//
// Why one connection behind a mutex: store traffic is rendezvous traffic (a few calls per rank
// per communicator), so simplicity wins over throughput; the server answers requests of one
// connection strictly one at a time.
//
// Deadlines: every call is bounded by its deadline. Blocking calls (Get, Wait, MultiGet, Barrier)
// also send the server a timeout a little shorter than the deadline, so that normally the server
// answers with a timeout that names exactly what was missing (for Barrier: how many of n
// arrived). If no reply comes before the deadline, the client closes the connection and
// reconnects lazily on the next call, so a late reply can never be taken for another call's.
// A lost server is Code::kSystemError naming host:port; the next call tries to reconnect once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "rendezvous/store.h"

namespace braid::rendezvous {

namespace protocol {
struct Request;
struct Response;
}  // namespace protocol

class TcpStoreClient : public Store {
 public:
  // Connects to host:port (a name, or an IPv4/IPv6 literal; "[::1]" brackets accepted), retrying
  // while the server is not up yet, until `deadline`; then authenticates both ways with `secret`
  // (HELLO/AUTH challenge-response; the secret itself is never sent; "" = no authentication, which
  // only a server without a secret accepts). Errors: kTimeout naming host:port if no server
  // answered in time; kInvalidUsage if the server refused our proof (another secret), could not
  // prove its own, or speaks another protocol version.
  static Result<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
                                                         const std::string& secret,
                                                         Deadline deadline);

  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;
  ~TcpStoreClient() override;

  // "host:port" ("[v6]:port" for IPv6 literals), as used in error messages.
  const std::string& address() const { return address_; }

  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  Result<std::string> Get(const std::string& key, Deadline deadline) override;
  Result<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  // c10d semantics: absent key and empty `expected` → stores `desired`; key holding `expected` →
  // stores `desired`; returns the value now held, except that an absent key with a non-empty
  // `expected` returns `expected` (and stores nothing), as c10d's TCPStore does.
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Result<bool> Check(const std::vector<std::string>& keys, Deadline deadline) override;
  Result<bool> DeleteKey(const std::string& key, Deadline deadline) override;
  Result<int64_t> NumKeys(Deadline deadline) override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            Deadline deadline) override;
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                  Deadline deadline) override;
  Status Append(const std::string& key, const std::string& value, Deadline deadline) override;
  // Sorted.
  Result<std::vector<std::string>> ListKeys(Deadline deadline) override;
  // Server-side counter per key, reset when the n-th caller arrives, so a key can be reused for
  // consecutive barriers. A caller that times out or disconnects withdraws its arrival.
  Status Barrier(const std::string& key, int n, Deadline deadline) override;

 private:
  TcpStoreClient(std::string host, int port, std::string secret);

  // Sends `request` and returns the server's reply (a non-OK reply code becomes the Status).
  // Holds mutex_ for the whole exchange.
  Result<protocol::Response> Call(protocol::Request request, Deadline deadline);
  // mutex_ held. Opens and greets a connection; `retry_until_deadline` keeps trying refused
  // connects (Connect) rather than failing on the first (lazy reconnects).
  Status OpenLocked(Deadline deadline, bool retry_until_deadline);
  void CloseLocked();
  // mutex_ held, connection open: HELLO/AUTH both ways (docs/STORE_PROTOCOL.md).
  Status HandshakeLocked(Deadline deadline);
  // mutex_ held: one request of the handshake and its reply (a non-OK reply becomes the Status).
  Result<protocol::Response> HandshakeStepLocked(const protocol::Request& request,
                                                 Deadline deadline);
  Status SendAllLocked(const std::string& bytes, Deadline deadline, const std::string& what);
  Status RecvAllLocked(uint8_t* data, size_t size, Deadline deadline, const std::string& what);
  // A description of the request for error messages: "GET 'key'".
  static std::string Describe(const protocol::Request& request);

  const std::string host_;
  const int port_;
  const std::string secret_;
  const std::string address_;

  // Guards everything below; held across a whole request/reply exchange.
  std::mutex mutex_;
  int fd_ = -1;
  uint32_t next_request_id_ = 1;
  size_t server_max_value_bytes_ = 0;  // learned from AUTH
};

}  // namespace braid::rendezvous
