// The bytes of a braidUniqueId: where the rendezvous store listens and the job's random token.
//
// Layout of braidUniqueId.internal (128 bytes): magic "BRDU", version (u16), port (u16),
// token (16 random bytes), host (NUL-terminated text: name or IPv4/IPv6 literal, < 100 bytes).
// The token namespaces the store's keys (several ids may share one server) and is the secret
// that store connections must present.
#pragma once

#include <string>

#include "core/base/status.h"

namespace braid::rendezvous {

constexpr size_t kUniqueIdBytes = 128;

struct UniqueIdFields {
  std::string host;
  int port = 0;
  std::string token;  // 32 lowercase hex characters
};

// Fails with InvalidArgument if the host does not fit or the token is not 32 hex characters.
Status EncodeUniqueId(const UniqueIdFields& fields, char out[kUniqueIdBytes]);
// Fails with InvalidArgument naming what is wrong (magic, version, port, host) when the bytes
// were not made by braidGetUniqueId.
Result<UniqueIdFields> DecodeUniqueId(const char in[kUniqueIdBytes]);
// 32 hex characters from the system's random source.
Result<std::string> RandomToken();

}  // namespace braid::rendezvous
