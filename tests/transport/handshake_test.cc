// The transports' one handshake (transport/handshake.h), step by step and without sockets: two
// parties hand each other frames as a transport would. Covers what every transport relies on:
// magic and version first, each refusal reason, the challenge-response (wrong secret, impostor,
// reflection, replay, another transport's proof), and garbage refused without a crash. The
// transports' own tests (tcp_transport_test, shm_transport_test, shm_auth_test) run the same
// module over real sockets.
#include "transport/handshake.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>

#include "core/base/hmac_sha256.h"

namespace braid::transport::handshake {
namespace {

constexpr Protocol kTcp{"tcp", 0x48545242};
constexpr Protocol kShm{"shm", 0x48534842};
constexpr uint64_t kComm = 0xC0FFEE;

Party Member(const Protocol& protocol, int rank, const std::string& secret = "s3cret",
             uint64_t comm_id = kComm, int size = 4) {
  return Party{protocol, comm_id, rank, size, secret};
}

// A frame of `step` from `sender` to `receiver` in kComm, as a peer of this build writes it.
Envelope Frame(const Protocol& protocol, Step step, int sender, int receiver) {
  Envelope e;
  e.magic = protocol.magic;
  e.step = static_cast<uint16_t>(step);
  e.comm_id = kComm;
  e.sender_rank = sender;
  e.receiver_rank = receiver;
  return e;
}

// Runs a handshake from `dialer` (rank d) to `listener` (rank l); returns where it stopped:
// "up", or "listener: <why>" / "dialer: <why>".
std::string Run(const Party& dialer_party, const Party& listener_party) {
  Dialer dialer(dialer_party, listener_party.rank);
  Listener listener(listener_party);
  Envelope hello, challenge, proof, answer;
  if (!dialer.WriteHello(&hello).ok()) return "no randomness";
  std::string why = listener.OnHello(hello);
  if (!why.empty()) return "listener: " + why;
  if (!listener.WriteChallenge(&challenge).ok()) return "no randomness";
  Dialer::Verdict verdict = dialer.OnChallenge(challenge, &proof);
  if (verdict.outcome != Dialer::Outcome::kContinue) return "dialer: " + verdict.why;
  bool wrong_secret = false;
  why = listener.OnProof(proof, &wrong_secret);
  if (!why.empty()) {
    // As the transports do: a peer that followed the protocol is told why.
    listener.WriteRefusal(why, proof, &answer);
    verdict = dialer.OnAnswer(answer);
    return "listener: " + why + " / dialer: " + verdict.why;
  }
  listener.WriteAccept(&answer);
  verdict = dialer.OnAnswer(answer);
  if (verdict.outcome != Dialer::Outcome::kContinue) return "dialer: " + verdict.why;
  return "up";
}

TEST_CASE("handshake: members holding one secret connect over every protocol", "[handshake]") {
  for (const Protocol& protocol : {kTcp, kShm}) {
    for (const std::string& secret : {std::string("s3cret"), std::string()}) {
      INFO(protocol.name << " secret '" << secret << "'");
      CHECK(Run(Member(protocol, 1, secret), Member(protocol, 3, secret)) == "up");
    }
  }
}

TEST_CASE("handshake: every frame starts with the protocol's magic and the version",
          "[handshake]") {
  Dialer dialer(Member(kShm, 0), 2);
  Listener listener(Member(kShm, 2));
  Envelope hello, challenge, proof, answer;
  REQUIRE(dialer.WriteHello(&hello).ok());
  REQUIRE(listener.OnHello(hello) == "");
  CHECK(listener.peer() == 0);
  REQUIRE(listener.WriteChallenge(&challenge).ok());
  REQUIRE(dialer.OnChallenge(challenge, &proof).outcome == Dialer::Outcome::kContinue);
  REQUIRE(listener.OnProof(proof, nullptr) == "");
  listener.WriteAccept(&answer);
  for (const Envelope* e : {&hello, &challenge, &proof, &answer}) {
    uint32_t magic;
    uint16_t version;
    std::memcpy(&magic, e, sizeof(magic));
    std::memcpy(&version, reinterpret_cast<const char*>(e) + 4, sizeof(version));
    CHECK(magic == kShm.magic);
    CHECK(version == kVersion);
  }
  CHECK(hello.step == static_cast<uint16_t>(Step::kHello));
  CHECK(challenge.step == static_cast<uint16_t>(Step::kChallenge));
  CHECK(proof.step == static_cast<uint16_t>(Step::kProof));
  CHECK(answer.step == static_cast<uint16_t>(Step::kAccept));
  // The secret itself never travels.
  for (const Envelope* e : {&hello, &challenge, &proof, &answer}) {
    std::string bytes(reinterpret_cast<const char*>(e), sizeof(*e));
    CHECK(bytes.find("s3cret") == std::string::npos);
  }
}

TEST_CASE("handshake: a listener refuses a hello naming what is wrong", "[handshake]") {
  Listener listener(Member(kTcp, 2));
  struct Case {
    const char* what;
    void (*spoil)(Envelope&);
    const char* says;
  };
  const Case cases[] = {
      {"bad magic", [](Envelope& e) { e.magic = 0xDEADBEEF; },
       "bad magic 0xdeadbeef (not a braid tcp peer)"},
      {"bad version", [](Envelope& e) { e.version = 2; },
       "peer speaks tcp handshake version 2, this build speaks 3"},
      {"not a hello", [](Envelope& e) { e.step = static_cast<uint16_t>(Step::kProof); },
       "unexpected handshake step 3 (proof; expected hello)"},
      {"unknown step", [](Envelope& e) { e.step = 77; }, "unexpected handshake step 77 (unknown"},
      {"another communicator", [](Envelope& e) { e.comm_id = 0xBAD; },
       "communicator id 0xbad is not this communicator's (0xc0ffee)"},
      {"addressed to another rank", [](Envelope& e) { e.receiver_rank = 3; },
       "handshake addressed to rank 3, this is rank 2"},
      {"from a higher rank", [](Envelope& e) { e.sender_rank = 3; },
       "sender rank 3 is not a lower rank"},
      {"from itself", [](Envelope& e) { e.sender_rank = 2; }, "sender rank 2 is not a lower rank"},
      {"from a negative rank", [](Envelope& e) { e.sender_rank = -1; }, "sender rank -1"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Envelope hello = Frame(kTcp, Step::kHello, 0, 2);
    c.spoil(hello);
    CHECK_THAT(listener.OnHello(hello), Catch::Contains(c.says));
    CHECK(listener.peer() == -1);
  }
  CHECK(listener.OnHello(Frame(kTcp, Step::kHello, 1, 2)) == "");
}

TEST_CASE("handshake: one transport's frames are strangers to another's", "[handshake]") {
  Dialer dialer(Member(kTcp, 0), 1);
  Envelope hello;
  REQUIRE(dialer.WriteHello(&hello).ok());
  Listener listener(Member(kShm, 1));
  CHECK_THAT(listener.OnHello(hello), Catch::Contains("not a braid shm peer"));
  CHECK_FALSE(SpeaksProtocol(kShm, hello));
  CHECK(SpeaksProtocol(kTcp, hello));
  // The proofs cover the protocol too: a tcp proof is worthless to shm with the same secret.
  CHECK(ProofContext(kTcp, kComm, 0, 1) != ProofContext(kShm, kComm, 0, 1));
}

TEST_CASE("handshake: different secrets are refused on both sides", "[handshake]") {
  for (const std::string& wrong : {std::string("other"), std::string()}) {
    INFO("dialer's secret '" << wrong << "'");
    const std::string outcome = Run(Member(kTcp, 0, wrong), Member(kTcp, 1, "right"));
    CHECK_THAT(outcome, Catch::StartsWith("listener: wrong secret"));
    CHECK_THAT(outcome, Catch::Contains("dialer: the two ranks hold different secrets"));
  }
  // The listener's side, as a transport sees it: the frame was well formed, so it is answered.
  Dialer dialer(Member(kShm, 0, "other"), 1);
  Listener listener(Member(kShm, 1, "right"));
  Envelope hello, challenge, proof, answer;
  REQUIRE(dialer.WriteHello(&hello).ok());
  REQUIRE(listener.OnHello(hello) == "");
  REQUIRE(listener.WriteChallenge(&challenge).ok());
  REQUIRE(dialer.OnChallenge(challenge, &proof).outcome == Dialer::Outcome::kContinue);
  bool wrong_secret = false;
  const std::string why = listener.OnProof(proof, &wrong_secret);
  CHECK(wrong_secret);
  listener.WriteRefusal(why, proof, &answer);
  CHECK(IsRefusal(kShm, answer));
  CHECK(answer.receiver_rank == 0);
  CHECK_THAT(ReasonOf(answer), Catch::StartsWith("wrong secret"));
  const Dialer::Verdict verdict = dialer.OnAnswer(answer);
  CHECK(verdict.outcome == Dialer::Outcome::kAuthFailed);
  CHECK_THAT(verdict.why, Catch::Contains("different secrets"));
}

TEST_CASE("handshake: a listener that cannot prove the secret is not trusted", "[handshake]") {
  Dialer dialer(Member(kTcp, 0), 1);
  Envelope hello, proof;
  REQUIRE(dialer.WriteHello(&hello).ok());
  // An impostor: right envelope, made-up proof, and it accepts whatever comes back.
  Envelope challenge = Frame(kTcp, Step::kChallenge, 1, 0);
  std::memset(challenge.nonce, 0x11, kAuthBytes);
  std::memset(challenge.proof, 0x22, kAuthBytes);
  REQUIRE(dialer.OnChallenge(challenge, &proof).outcome == Dialer::Outcome::kContinue);
  const Dialer::Verdict verdict = dialer.OnAnswer(Frame(kTcp, Step::kAccept, 1, 0));
  CHECK(verdict.outcome == Dialer::Outcome::kAuthFailed);
  CHECK_THAT(verdict.why, Catch::Contains("could not prove"));
}

TEST_CASE("handshake: a reflected or replayed proof is refused", "[handshake]") {
  SECTION("the listener's own proof sent back") {
    Listener listener(Member(kTcp, 1));
    Envelope hello = Frame(kTcp, Step::kHello, 0, 1), challenge;
    REQUIRE(listener.OnHello(hello) == "");
    REQUIRE(listener.WriteChallenge(&challenge).ok());
    Envelope proof = Frame(kTcp, Step::kProof, 0, 1);
    std::memcpy(proof.proof, challenge.proof, kAuthBytes);
    bool wrong_secret = false;
    CHECK_THAT(listener.OnProof(proof, &wrong_secret), Catch::StartsWith("wrong secret"));
    CHECK(wrong_secret);
  }
  SECTION("a proof captured on one connection, replayed on the next") {
    Dialer dialer(Member(kTcp, 0), 1);
    Listener first(Member(kTcp, 1));
    Envelope hello, challenge, proof;
    REQUIRE(dialer.WriteHello(&hello).ok());
    REQUIRE(first.OnHello(hello) == "");
    REQUIRE(first.WriteChallenge(&challenge).ok());
    REQUIRE(dialer.OnChallenge(challenge, &proof).outcome == Dialer::Outcome::kContinue);
    REQUIRE(first.OnProof(proof, nullptr) == "");
    // The same hello and proof on a new connection meet a fresh challenge.
    Listener second(Member(kTcp, 1));
    Envelope fresh;
    REQUIRE(second.OnHello(hello) == "");
    REQUIRE(second.WriteChallenge(&fresh).ok());
    CHECK(std::memcmp(fresh.nonce, challenge.nonce, kAuthBytes) != 0);
    CHECK_THAT(second.OnProof(proof, nullptr), Catch::StartsWith("wrong secret"));
  }
  SECTION("a proof before any challenge") {
    Listener listener(Member(kTcp, 1));
    CHECK_FALSE(listener.OnProof(Frame(kTcp, Step::kProof, 0, 1), nullptr).empty());
  }
}

TEST_CASE("handshake: the dialer reads a refusal at either step", "[handshake]") {
  // A listener of another communicator refuses the hello; its refusal carries its own id, and
  // the dialer still reads the reason.
  Dialer dialer(Member(kShm, 0, "s3cret", /*comm_id=*/0x2222), 1);
  Listener listener(Member(kShm, 1, "s3cret", /*comm_id=*/0x1111));
  Envelope hello, refusal, proof;
  REQUIRE(dialer.WriteHello(&hello).ok());
  const std::string why = listener.OnHello(hello);
  CHECK_THAT(why, Catch::Contains("communicator id 0x2222"));
  listener.WriteRefusal(why, hello, &refusal);
  CHECK(refusal.receiver_rank == 0);
  const Dialer::Verdict verdict = dialer.OnChallenge(refusal, &proof);
  CHECK(verdict.outcome == Dialer::Outcome::kRefused);
  CHECK(verdict.why == why);
}

TEST_CASE("handshake: a refusal's reason is cut to its field and read safely", "[handshake]") {
  Listener listener(Member(kTcp, 1));
  Envelope hello = Frame(kTcp, Step::kHello, 0, 1), answer;
  listener.WriteRefusal(std::string(1000, 'x'), hello, &answer);
  CHECK(ReasonOf(answer) == std::string(kReasonBytes - 1, 'x'));
  // A peer's reason without a NUL stops at the field's end.
  std::memset(answer.reason, 'y', sizeof(answer.reason));
  CHECK(ReasonOf(answer) == std::string(kReasonBytes, 'y'));
}

TEST_CASE("handshake: CheckSize names a frame of another size", "[handshake]") {
  Envelope e = Frame(kShm, Step::kHello, 0, 1);
  CHECK(CheckSize(kShm, e, 256, 256) == "");
  CHECK_THAT(CheckSize(kShm, e, 10, 256), Catch::Contains("a frame of 10 bytes"));
  e.version = 9;
  CHECK_THAT(CheckSize(kShm, e, 200, 256), Catch::Contains("handshake version 9"));
  e.magic = 0;
  CHECK_THAT(CheckSize(kShm, e, 200, 256), Catch::Contains("a frame of 200 bytes"));
}

TEST_CASE("handshake: garbage is refused at every step without a crash", "[handshake]") {
  std::mt19937_64 random(12345);
  auto garbage = [&](bool keep_prefix) {
    Envelope e;
    auto* bytes = reinterpret_cast<uint8_t*>(&e);
    for (size_t i = 0; i < sizeof(e); ++i) bytes[i] = static_cast<uint8_t>(random());
    if (keep_prefix) {  // a plausible envelope with garbage behind and around it
      e.magic = kTcp.magic;
      e.version = kVersion;
      e.comm_id = kComm;
    }
    return e;
  };
  for (int i = 0; i < 5000; ++i) {
    const bool keep_prefix = i % 2 == 0;
    Listener listener(Member(kTcp, 1));
    Envelope hello = garbage(keep_prefix);
    if (listener.OnHello(hello).empty()) {
      // Only a real hello to rank 1 from rank 0 gets through; the proof is what stops garbage.
      CHECK(hello.step == static_cast<uint16_t>(Step::kHello));
      CHECK(hello.sender_rank == 0);
      Envelope challenge;
      REQUIRE(listener.WriteChallenge(&challenge).ok());
      CHECK_FALSE(listener.OnProof(garbage(keep_prefix), nullptr).empty());
    }
    Dialer dialer(Member(kTcp, 0), 1);
    Envelope mine, proof;
    REQUIRE(dialer.WriteHello(&mine).ok());
    const Dialer::Verdict first = dialer.OnChallenge(garbage(keep_prefix), &proof);
    if (first.outcome == Dialer::Outcome::kContinue) {
      // A forged challenge cannot carry the listener's proof, so no accept makes the link.
      Envelope accept = Frame(kTcp, Step::kAccept, 1, 0);
      CHECK(dialer.OnAnswer(accept).outcome != Dialer::Outcome::kContinue);
    }
    (void)ReasonOf(garbage(keep_prefix));
  }
}

}  // namespace
}  // namespace braid::transport::handshake
