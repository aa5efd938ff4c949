// The one handshake every link-making transport (tcp/, shm/; verbs and cuda_ipc later) runs when
// it opens a connection: the frame it travels in, the magic and version, the HMAC
// challenge-response over the communicator's secret (TransportContext::secret), and the refusal
// reasons. A transport supplies only the byte moving (Asio, a Unix socket, ...) and what it needs
// besides (shm passes a segment descriptor and probe addresses after the envelope).
//
// The exchange, dialer D (the lower rank of the pair) and listener L (the higher rank):
//   D -> L  kHello      nonce = D's fresh nonce (cD)
//   L -> D  kChallenge  nonce = L's fresh nonce (cL), proof = L's proof (ProofRole::kServer)
//   D -> L  kProof      proof = D's proof (kClient)
//   L -> D  kAccept     or kRefuse with a reason (wrong secret, aborted, already connected, ...)
// L may also answer a hello with kRefuse, and closes after any refusal; a frame that does not
// even carry the transport's magic gets no answer, only the close.
//
// Why this shape:
// - Every frame starts with a magic and a version, then the communicator and both ranks (the
//   envelope's 24-byte prefix, the same in every version), so a stranger, a peer of another
//   build, another job or a stale address is refused with a reason that names the mismatch
//   instead of being read as data. The prefix can be read first (tcp does), so a peer of another
//   version is named at once rather than waited on for bytes it will never send.
// - Both proofs cover ProofContext(protocol, communicator, D, L) and both nonces, so the secret
//   never travels, a captured handshake is worthless on another connection (L's nonce is fresh),
//   and neither side's proof can be reflected as the other's. An empty secret is a key anyone
//   holds: "no authentication", as long as both sides agree on it.
// - D judges L's proof only after its own was judged, so a pair with different secrets is
//   refused and logged on both sides; D counts the link as up only once kAccept arrives, so any
//   refusal is seen at Connect.
// - Judging is separate from moving bytes (the two classes below take and produce frames and
//   never block), so a transport cannot get the order of the steps or a check wrong, and the
//   steps are tested without sockets (tests/transport/handshake_test.cc).
//
// Fields travel in host byte order: ranks of one job run one build on one architecture, and a
// peer of the other endianness fails the magic check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/base/hmac_sha256.h"
#include "core/base/status.h"

namespace braid::transport::handshake {

// Version 3: one handshake for every transport (tcp and shm spoke version 2 each, with their own
// step numbers); a refusal carries its reason.
constexpr uint16_t kVersion = 3;

// The step a frame is; the numbers are the wire's.
enum class Step : uint16_t {
  kHello = 1,
  kChallenge = 2,
  kProof = 3,
  kAccept = 4,
  kRefuse = 5,
};

// What tells one transport's handshake from another's.
struct Protocol {
  const char* name;  // "tcp", "shm": in refusal reasons and in the proofs' context
  uint32_t magic;    // the first four bytes of every frame
};

// Bytes of a nonce field and of a proof field.
constexpr size_t kAuthBytes = crypto::kDigestBytes;
static_assert(crypto::kNonceBytes == kAuthBytes, "nonce and proof fields have one size");
using Field = uint8_t[kAuthBytes];

// Bytes of a refusal's reason, NUL included (longer reasons are cut).
constexpr size_t kReasonBytes = 128;

// The part of every handshake frame this module owns. A transport's frame is an Envelope, or
// starts with one and appends its own fields (shm/wire.h).
struct Envelope {
  uint32_t magic = 0;
  uint16_t version = kVersion;
  uint16_t step = 0;
  uint64_t comm_id = 0;
  int32_t sender_rank = -1;
  int32_t receiver_rank = -1;
  // --- kPrefixBytes: every version starts with the fields above ---
  uint8_t nonce[kAuthBytes] = {};  // kHello, kChallenge
  uint8_t proof[kAuthBytes] = {};  // kChallenge, kProof
  char reason[kReasonBytes] = {};  // kRefuse: why, NUL-terminated (not trusted to be)
};
constexpr size_t kPrefixBytes = 24;
static_assert(offsetof(Envelope, nonce) == kPrefixBytes, "envelope prefix");
static_assert(sizeof(Envelope) == kPrefixBytes + 2 * kAuthBytes + kReasonBytes, "envelope layout");
static_assert(std::is_trivially_copyable<Envelope>::value, "sent as raw bytes");

// Whether `frame` carries `protocol`'s magic: its sender speaks this handshake (perhaps another
// version of it) and can read a refusal. A stranger gets none. Pure.
bool SpeaksProtocol(const Protocol& protocol, const Envelope& frame);

// Whether `frame` is a refusal of this version, whatever else it says. Pure.
bool IsRefusal(const Protocol& protocol, const Envelope& frame);

// What is wrong with the size of a received frame of `got` bytes where `expected` make a frame,
// or "". A frame of another size is named by its version when its prefix arrived. Pure.
std::string CheckSize(const Protocol& protocol, const Envelope& frame, size_t got,
                      size_t expected);

// The reason a refusal carries, read without trusting it to be NUL-terminated. Pure.
std::string ReasonOf(const Envelope& frame);

// The `context` both proofs of one link cover: the protocol and its version, the communicator,
// and who dials whom. Pure.
std::string ProofContext(const Protocol& protocol, uint64_t comm_id, int dialer, int listener);

// Writes into `proof` the proof that a holder of `secret` in `role` sends for this context and
// these nonces. Pure. (The classes below call it; tests forge and check proofs with it.)
void WriteProof(Field& proof, const std::string& secret, crypto::ProofRole role,
                const std::string& context, const std::string& client_nonce,
                const std::string& server_nonce);

// The bytes of a nonce or proof field. Pure.
std::string FieldBytes(const Field& field);

// One side of a link being made: the transport, the communicator and this rank in it.
struct Party {
  Protocol protocol;
  uint64_t comm_id = 0;
  int rank = -1;
  int size = 0;
  std::string secret;
};

// The listener's side of one handshake. Not thread-safe (one per accepted connection, driven by
// one thread at a time); never blocks; owns no socket.
class Listener {
 public:
  explicit Listener(Party self);

  // Judges the dialer's first frame: "" if it is a hello of this version to this rank from a
  // lower rank of this communicator, else the refusal reason. On "", peer() is that rank.
  std::string OnHello(const Envelope& hello);

  // The dialer's rank once OnHello accepted its hello, else -1.
  int peer() const { return peer_; }

  // Writes the challenge (this side's fresh nonce and its proof) into `challenge`. Call after
  // OnHello returned "" (and after any checks of the transport's own). Fails (kSystemError) only
  // when the kernel has no random source.
  Status WriteChallenge(Envelope* challenge);

  // Judges the dialer's proof frame: "" if it is a proof frame from peer() that shows the secret,
  // else the refusal reason. `*wrong_secret` (may be null) is set when the frame was well formed
  // but the proof wrong: a peer that followed the protocol, so it deserves a refusal it can read.
  // Call after WriteChallenge.
  std::string OnProof(const Envelope& proof, bool* wrong_secret);

  // Writes the final accept to peer() into `answer`.
  void WriteAccept(Envelope* answer) const;

  // Writes a refusal with `why` (cut to kReasonBytes - 1) into `answer`, addressed to peer() or,
  // before a hello was accepted, to the rank `frame` names.
  void WriteRefusal(const std::string& why, const Envelope& frame, Envelope* answer) const;

 private:
  Party self_;
  int peer_ = -1;
  std::string client_nonce_;
  std::string server_nonce_;
};

// The dialer's side of one handshake to `peer`. Not thread-safe; never blocks; owns no socket.
class Dialer {
 public:
  // How a step ended for the dialer.
  enum class Outcome {
    kContinue,    // send the frame written and read the next (OnChallenge), or the link is up
                  // (OnAnswer)
    kRefused,     // the listener refused, or sent what is not the next step: `why` says which
    kAuthFailed,  // a secret did not match (different secrets, or an impostor): `why` says which
  };
  struct Verdict {
    Outcome outcome = Outcome::kContinue;
    std::string why;
  };

  Dialer(Party self, int peer);

  // Writes the hello (this side's fresh nonce) into `hello`. Fails (kSystemError) only when the
  // kernel has no random source.
  Status WriteHello(Envelope* hello);

  // Judges the listener's answer to the hello; on kContinue, this side's proof is in `proof`.
  // The listener's own proof is noted here and judged in OnAnswer, after it judged ours.
  Verdict OnChallenge(const Envelope& challenge, Envelope* proof);

  // Judges the listener's verdict on our proof: kContinue means the link is up.
  Verdict OnAnswer(const Envelope& answer);

 private:
  Party self_;
  int peer_;
  std::string client_nonce_;
  bool listener_proved_ = false;  // the challenge carried a valid proof of the secret
};

}  // namespace braid::transport::handshake
