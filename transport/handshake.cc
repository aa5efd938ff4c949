// The transports' one handshake (see handshake.h for the exchange and why).
#include "transport/handshake.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

namespace braid::transport::handshake {
namespace {

std::string Hex(uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

const char* StepName(uint16_t step) {
  switch (static_cast<Step>(step)) {
    case Step::kHello:
      return "hello";
    case Step::kChallenge:
      return "challenge";
    case Step::kProof:
      return "proof";
    case Step::kAccept:
      return "accept";
    case Step::kRefuse:
      return "refusal";
  }
  return "unknown";
}

// What is wrong with `frame`, or "" if it is a valid frame of `step` from `expected_sender` (any
// lower rank of the communicator when < 0) to `self`. The one list of refusal reasons for a
// frame's envelope.
std::string Check(const Party& self, const Envelope& frame, Step step, int expected_sender) {
  const std::string name = self.protocol.name;
  if (frame.magic != self.protocol.magic) {
    return "bad magic " + Hex(frame.magic) + " (not a braid " + name + " peer)";
  }
  if (frame.version != kVersion) {
    return "peer speaks " + name + " handshake version " + std::to_string(frame.version) +
           ", this build speaks " + std::to_string(kVersion);
  }
  if (frame.step != static_cast<uint16_t>(step)) {
    return "unexpected handshake step " + std::to_string(frame.step) + " (" +
           StepName(frame.step) + "; expected " + StepName(static_cast<uint16_t>(step)) + ")";
  }
  if (frame.comm_id != self.comm_id) {
    return "communicator id " + Hex(frame.comm_id) + " is not this communicator's (" +
           Hex(self.comm_id) + ")";
  }
  if (frame.receiver_rank != self.rank) {
    return "handshake addressed to rank " + std::to_string(frame.receiver_rank) +
           ", this is rank " + std::to_string(self.rank);
  }
  if (expected_sender >= 0) {
    if (frame.sender_rank != expected_sender) {
      return "handshake from rank " + std::to_string(frame.sender_rank) + ", expected rank " +
             std::to_string(expected_sender);
    }
  } else if (frame.sender_rank < 0 || frame.sender_rank >= self.rank ||
             frame.sender_rank >= self.size) {
    return "sender rank " + std::to_string(frame.sender_rank) +
           " is not a lower rank of this communicator of size " + std::to_string(self.size) +
           " (the lower rank of a pair dials)";
  }
  return "";
}

// Fills the envelope's prefix of a frame of `step` from `self` to `receiver`.
void Address(const Party& self, Step step, int receiver, Envelope* frame) {
  frame->magic = self.protocol.magic;
  frame->version = kVersion;
  frame->step = static_cast<uint16_t>(step);
  frame->comm_id = self.comm_id;
  frame->sender_rank = self.rank;
  frame->receiver_rank = receiver;
}

// A fresh random nonce written into `field`; also returned as bytes for the proofs.
Result<std::string> NewNonce(Field& field) {
  BRAID_RETURN_IF_ERROR(crypto::RandomBytes(field, kAuthBytes));
  return FieldBytes(field);
}

bool ProofMatches(const Field& proof, const std::string& secret, crypto::ProofRole role,
                  const std::string& context, const std::string& client_nonce,
                  const std::string& server_nonce) {
  const crypto::Digest expected =
      crypto::ChallengeProof(secret, role, context, client_nonce, server_nonce);
  // Constant time, so a forger learns nothing from how fast it is refused.
  return crypto::ConstantTimeEqual(proof, expected.data(), kAuthBytes);
}

}  // namespace

bool SpeaksProtocol(const Protocol& protocol, const Envelope& frame) {
  return frame.magic == protocol.magic;
}

bool IsRefusal(const Protocol& protocol, const Envelope& frame) {
  return frame.magic == protocol.magic && frame.version == kVersion &&
         frame.step == static_cast<uint16_t>(Step::kRefuse);
}

std::string CheckSize(const Protocol& protocol, const Envelope& frame, size_t got,
                      size_t expected) {
  if (got == expected) return "";
  if (got >= kPrefixBytes && frame.magic == protocol.magic && frame.version != kVersion) {
    return "peer speaks " + std::string(protocol.name) + " handshake version " +
           std::to_string(frame.version) + ", this build speaks " + std::to_string(kVersion);
  }
  return "a frame of " + std::to_string(got) + " bytes (a " + protocol.name +
         " handshake frame has " + std::to_string(expected) + ")";
}

std::string ReasonOf(const Envelope& frame) {
  return std::string(frame.reason, strnlen(frame.reason, sizeof(frame.reason)));
}

std::string ProofContext(const Protocol& protocol, uint64_t comm_id, int dialer, int listener) {
  return "braid-" + std::string(protocol.name) + "/" + std::to_string(kVersion) +
         " comm=" + std::to_string(comm_id) + " dialer=" + std::to_string(dialer) +
         " listener=" + std::to_string(listener);
}

void WriteProof(Field& proof, const std::string& secret, crypto::ProofRole role,
                const std::string& context, const std::string& client_nonce,
                const std::string& server_nonce) {
  const crypto::Digest digest =
      crypto::ChallengeProof(secret, role, context, client_nonce, server_nonce);
  std::memcpy(proof, digest.data(), kAuthBytes);
}

std::string FieldBytes(const Field& field) {
  return std::string(reinterpret_cast<const char*>(field), kAuthBytes);
}

// ---- Listener ----

Listener::Listener(Party self) : self_(std::move(self)) {}

std::string Listener::OnHello(const Envelope& hello) {
  std::string why = Check(self_, hello, Step::kHello, -1);
  if (!why.empty()) return why;
  peer_ = hello.sender_rank;
  client_nonce_ = FieldBytes(hello.nonce);
  return "";
}

Status Listener::WriteChallenge(Envelope* challenge) {
  Result<std::string> nonce = NewNonce(challenge->nonce);
  if (!nonce.ok()) return nonce.status();
  server_nonce_ = std::move(nonce).value();
  Address(self_, Step::kChallenge, peer_, challenge);
  WriteProof(challenge->proof, self_.secret, crypto::ProofRole::kServer,
             ProofContext(self_.protocol, self_.comm_id, peer_, self_.rank), client_nonce_,
             server_nonce_);
  return Status::Ok();
}

std::string Listener::OnProof(const Envelope& proof, bool* wrong_secret) {
  if (wrong_secret != nullptr) *wrong_secret = false;
  if (peer_ < 0 || server_nonce_.empty()) return "a proof before a hello and a challenge";
  std::string why = Check(self_, proof, Step::kProof, peer_);
  if (!why.empty()) return why;
  if (!ProofMatches(proof.proof, self_.secret, crypto::ProofRole::kClient,
                    ProofContext(self_.protocol, self_.comm_id, peer_, self_.rank),
                    client_nonce_, server_nonce_)) {
    if (wrong_secret != nullptr) *wrong_secret = true;
    return "wrong secret: the peer claiming to be rank " + std::to_string(peer_) +
           " does not prove it holds this communicator's secret (a rank of another job reusing "
           "this address, a replayed handshake, or ranks given different secrets)";
  }
  return "";
}

void Listener::WriteAccept(Envelope* answer) const {
  Address(self_, Step::kAccept, peer_, answer);
}

void Listener::WriteRefusal(const std::string& why, const Envelope& frame,
                            Envelope* answer) const {
  Address(self_, Step::kRefuse, peer_ >= 0 ? peer_ : frame.sender_rank, answer);
  std::memset(answer->reason, 0, sizeof(answer->reason));
  std::memcpy(answer->reason, why.data(), std::min(why.size(), sizeof(answer->reason) - 1));
}

// ---- Dialer ----

Dialer::Dialer(Party self, int peer) : self_(std::move(self)), peer_(peer) {}

Status Dialer::WriteHello(Envelope* hello) {
  Result<std::string> nonce = NewNonce(hello->nonce);
  if (!nonce.ok()) return nonce.status();
  client_nonce_ = std::move(nonce).value();
  Address(self_, Step::kHello, peer_, hello);
  return Status::Ok();
}

// A refusal is believed whatever its envelope says: it carries the listener's own communicator
// (which may be why it refused), and a forged one only makes this side give up, as a close would.
Dialer::Verdict Dialer::OnChallenge(const Envelope& challenge, Envelope* proof) {
  if (IsRefusal(self_.protocol, challenge)) return {Outcome::kRefused, ReasonOf(challenge)};
  std::string why = Check(self_, challenge, Step::kChallenge, peer_);
  if (!why.empty()) return {Outcome::kRefused, why};
  const std::string context = ProofContext(self_.protocol, self_.comm_id, self_.rank, peer_);
  const std::string server_nonce = FieldBytes(challenge.nonce);
  listener_proved_ = ProofMatches(challenge.proof, self_.secret, crypto::ProofRole::kServer,
                                  context, client_nonce_, server_nonce);
  Address(self_, Step::kProof, peer_, proof);
  WriteProof(proof->proof, self_.secret, crypto::ProofRole::kClient, context, client_nonce_,
             server_nonce);
  return {Outcome::kContinue, ""};
}

Dialer::Verdict Dialer::OnAnswer(const Envelope& answer) {
  if (IsRefusal(self_.protocol, answer)) {
    if (!listener_proved_) {
      // Neither side accepted the other's proof: the secrets differ.
      return {Outcome::kAuthFailed,
              "the two ranks hold different secrets: it refused this rank's proof of the "
              "communicator's secret and could not prove its own (a rank of another job on that "
              "address?)"};
    }
    return {Outcome::kRefused, ReasonOf(answer)};
  }
  std::string why = Check(self_, answer, Step::kAccept, peer_);
  if (!why.empty()) return {Outcome::kRefused, why};
  if (!listener_proved_) {
    return {Outcome::kAuthFailed,
            "it could not prove that it holds this communicator's secret (an impostor, or a rank "
            "of another job on that address)"};
  }
  return {Outcome::kContinue, ""};
}

}  // namespace braid::transport::handshake
