// The transports' challenge-response helpers (see auth_handshake.h for the exchange).
#include "transport/auth_handshake.h"

#include <cstring>

namespace braid::transport::auth {

Result<std::string> NewNonce(Field& field) {
  std::string nonce(kAuthBytes, '\0');
  BRAID_RETURN_IF_ERROR(crypto::RandomBytes(field, kAuthBytes));
  std::memcpy(&nonce[0], field, kAuthBytes);
  return nonce;
}

std::string FieldBytes(const Field& field) {
  return std::string(reinterpret_cast<const char*>(field), kAuthBytes);
}

void WriteProof(Field& proof, const std::string& secret, crypto::ProofRole role,
                const std::string& context, const std::string& client_nonce,
                const std::string& server_nonce) {
  crypto::Digest digest =
      crypto::ChallengeProof(secret, role, context, client_nonce, server_nonce);
  std::memcpy(proof, digest.data(), kAuthBytes);
}

bool ProofMatches(const Field& proof, const std::string& secret, crypto::ProofRole role,
                  const std::string& context, const std::string& client_nonce,
                  const std::string& server_nonce) {
  crypto::Digest expected =
      crypto::ChallengeProof(secret, role, context, client_nonce, server_nonce);
  return crypto::ConstantTimeEqual(proof, expected.data(), kAuthBytes);
}

}  // namespace braid::transport::auth
