// The challenge-response both link-making transports (tcp/, shm/) run over the communicator's
// secret (TransportContext::secret), as pure functions over the fixed-size fields of their
// handshake frames.
//
// Why shared: the proof (core/hmac_sha256.h, ChallengeProof) is the same for every transport; only
// the frames that carry it and the `context` each proof covers differ. Keeping the nonce, proof
// and comparison in one place means a fix here (say, to the comparison) reaches every transport.
//
// The exchange every transport runs with it, dialer D and listener L:
//   D -> L  D's fresh nonce
//   L -> D  L's fresh nonce and L's proof (kServer)
//   D -> L  D's proof (kClient)
//   L -> D  accepted, or refused when D's proof is wrong
// Both proofs cover the transport's context (protocol, communicator, who dials whom) and both
// nonces, so the secret never travels, a captured handshake is worthless on another connection,
// and a listener's proof cannot be reflected back as a dialer's. An empty secret is a key anyone
// holds: "no authentication", as long as both sides agree on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/hmac_sha256.h"
#include "core/status.h"

namespace braid::transport::auth {

// Bytes of a nonce field and of a proof field in a handshake frame.
constexpr size_t kAuthBytes = crypto::kDigestBytes;
static_assert(crypto::kNonceBytes == kAuthBytes, "nonce and proof fields have one size");

using Field = uint8_t[kAuthBytes];

// A fresh random nonce written into `field`; also returned as bytes for the proofs to come.
// Fails (kSystemError) only when the kernel has no random source.
Result<std::string> NewNonce(Field& field);

// The bytes of a frame's nonce field, as the proofs take them.
std::string FieldBytes(const Field& field);

// Writes into `proof` the proof that this party, in `role`, holds `secret`.
void WriteProof(Field& proof, const std::string& secret, crypto::ProofRole role,
                const std::string& context, const std::string& client_nonce,
                const std::string& server_nonce);

// True if `proof` is what a holder of `secret` in `role` sends for this context and these nonces.
// Compared in constant time, so a forger learns nothing from how fast it is refused.
bool ProofMatches(const Field& proof, const std::string& secret, crypto::ProofRole role,
                  const std::string& context, const std::string& client_nonce,
                  const std::string& server_nonce);

}  // namespace braid::transport::auth
