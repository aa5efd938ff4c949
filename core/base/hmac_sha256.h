// SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and the challenge-response proof that the store
// and the TCP transport use to authenticate a connection (docs/STORE_PROTOCOL.md,
// "Authentication").
//
// Why our own: authentication needs a keyed MAC and nothing else from a crypto library, and
// braid links no OpenSSL. The code is the textbook algorithm, checked against the FIPS 180-2 and
// RFC 4231 test vectors (tests/core/hmac_sha256_test.cc); it is not written to resist timing
// attacks on the hashing itself (inputs are public nonces and a fixed secret), but proofs are
// compared with ConstantTimeEqual.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace braid::crypto {

inline constexpr size_t kDigestBytes = 32;
inline constexpr size_t kNonceBytes = 32;
using Digest = std::array<uint8_t, kDigestBytes>;

// Incremental SHA-256. Finish() may be called once; the object is then spent.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(const std::string& data) { Update(data.data(), data.size()); }
  Digest Finish();

 private:
  void Block(const uint8_t* block);

  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest Sha256Of(const std::string& data);

// Incremental HMAC-SHA256 with `key` (any length; longer than 64 bytes is hashed first).
class HmacSha256 {
 public:
  explicit HmacSha256(const std::string& key);
  void Update(const void* data, size_t size) { inner_.Update(data, size); }
  void Update(const std::string& data) { inner_.Update(data); }
  Digest Finish();

 private:
  Sha256 inner_;
  uint8_t outer_key_[64];
};

Digest HmacSha256Of(const std::string& key, const std::string& message);

// Compares `size` bytes in time independent of where they differ.
bool ConstantTimeEqual(const void* a, const void* b, size_t size);

// Lowercase hex of `size` bytes.
std::string ToHex(const void* data, size_t size);

// Fills `out` from the kernel's random source (getrandom(2), /dev/urandom as fallback).
// Fails with kSystemError only if neither is available.
Status RandomBytes(void* out, size_t size);
// kNonceBytes fresh random bytes.
Result<std::string> NewNonce();

// Who computes a proof. The two roles hash different labels, so a proof a server sent can never
// be reflected back to it as a client's proof.
enum class ProofRole { kClient, kServer };

// The proof that a party holds `secret`:
//   HMAC-SHA256(secret, "braid-auth/1" 0x00 role 0x00 u32be(len(context)) context
//               u32be(len(client_nonce)) client_nonce u32be(len(server_nonce)) server_nonce)
// where role is "client" or "server" and `context` names the protocol and the link (for example
// "store/2", or the tcp transport's communicator and ranks), so a proof made for one link or
// protocol is worthless on another. Each side contributes a fresh nonce, so a proof is worthless
// on any other connection: a captured handshake cannot be replayed. An empty secret is a valid
// HMAC key that anyone can use: it means "no authentication" (both sides must agree on it).
Digest ChallengeProof(const std::string& secret, ProofRole role, const std::string& context,
                      const std::string& client_nonce, const std::string& server_nonce);

}  // namespace braid::crypto
