// Is a rank's TCP listener still there? The cheap liveness signal Connect uses while it waits
// for a peer.
//
// Why this works: a rank's listening socket lives exactly as long as its transport, and the
// kernel closes it when the process exits or is killed (SIGKILL included). A peer whose
// published address refuses connections is therefore gone, and Connect can say so within a
// second instead of waiting out the communicator's timeout (30 minutes by default). A probe
// that gets through is harmless: it closes before sending a byte, which the peer's listener
// drops quietly (tcp_transport.cc, OnHello).
#pragma once

#include <cstdint>
#include <string>

namespace braid::transport::tcp {

enum class ProbeResult {
  kListening,  // the connection was accepted: the peer's transport is alive
  kRefused,    // nobody listens there any more: the peer is gone
  kUnknown,    // no answer in time, unreachable, or the address is unusable: cannot tell
};

struct ListenerProbe {
  ProbeResult result = ProbeResult::kUnknown;
  std::string detail;  // the error seen, for messages ("" when listening)
};

// Connects to `ip`:`port` (numeric IPv4 or IPv6, scope ids allowed), waiting at most
// `timeout_ms`, and closes the connection at once. Blocks the calling thread; never throws.
ListenerProbe ProbeListener(const std::string& ip, uint16_t port, int timeout_ms);

}  // namespace braid::transport::tcp
