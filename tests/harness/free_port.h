// FreePort: a TCP port on loopback that nothing listens on, for tests that must name a port
// before the process that listens on it starts (env:// MASTER_PORT, braidrun --master-port).
#pragma once

namespace braid::testing {

// A port below the kernel's ephemeral range (ip_local_port_range) that could be bound just now.
// Below that range, no outgoing connection is handed the port between this check and the
// listener's bind; asking the kernel for port 0 instead returned ports that parallel tests'
// connections took first ("Address already in use", seen in CI).
int FreePort();

}  // namespace braid::testing
