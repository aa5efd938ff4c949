// SHA-256 against FIPS 180-2 (appendix B) and HMAC-SHA256 against RFC 4231; the challenge proof's
// binding to role, context and nonces.
#include "core/base/hmac_sha256.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

namespace braid::crypto {
namespace {

std::string Hex(const Digest& d) { return ToHex(d.data(), d.size()); }

std::string Bytes(size_t n, uint8_t value) { return std::string(n, static_cast<char>(value)); }

TEST_CASE("sha256: FIPS 180-2 vectors", "[crypto]") {
  CHECK(Hex(Sha256Of("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Hex(Sha256Of("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Hex(Sha256Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(Hex(Sha256Of(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256: any split of the input gives the same digest", "[crypto]") {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  const Digest whole = Sha256Of(data);
  for (size_t step : {1, 3, 55, 56, 63, 64, 65, 127, 200}) {
    Sha256 h;
    for (size_t at = 0; at < data.size(); at += step) {
      h.Update(data.data() + at, std::min(step, data.size() - at));
    }
    INFO("step " << step);
    CHECK(h.Finish() == whole);
  }
  // Lengths around the padding boundary.
  std::set<std::string> digests;
  for (size_t n = 50; n < 70; ++n) digests.insert(Hex(Sha256Of(std::string(n, 'x'))));
  CHECK(digests.size() == 20);
}

TEST_CASE("hmac-sha256: RFC 4231 vectors", "[crypto]") {
  // Test case 1.
  CHECK(Hex(HmacSha256Of(Bytes(20, 0x0b), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the output.
  CHECK(Hex(HmacSha256Of("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3.
  CHECK(Hex(HmacSha256Of(Bytes(20, 0xaa), Bytes(50, 0xdd))) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4.
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  CHECK(Hex(HmacSha256Of(key4, Bytes(50, 0xcd))) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5: the RFC gives the first 128 bits.
  CHECK(Hex(HmacSha256Of(Bytes(20, 0x0c), "Test With Truncation")).substr(0, 32) ==
        "a3b6167473100ee06e0c796c2955552b");
  // Test case 6: a key longer than the block is hashed first.
  CHECK(Hex(HmacSha256Of(Bytes(131, 0xaa),
                         "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7.
  CHECK(Hex(HmacSha256Of(Bytes(131, 0xaa),
                         "This is a test using a larger than block-size key and a larger than "
                         "block-size data. The key needs to be hashed before being used by the "
                         "HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("hmac-sha256: incremental equals one-shot", "[crypto]") {
  HmacSha256 mac("key");
  mac.Update("The quick brown fox ");
  mac.Update("jumps over the lazy dog");
  CHECK(Hex(mac.Finish()) == "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
}

TEST_CASE("constant-time compare, hex, random bytes", "[crypto]") {
  CHECK(ConstantTimeEqual("abcd", "abcd", 4));
  CHECK_FALSE(ConstantTimeEqual("abcd", "abce", 4));
  CHECK(ConstantTimeEqual("x", "y", 0));
  CHECK(ToHex("\x01\xab", 2) == "01ab");
  Result<std::string> a = NewNonce();
  Result<std::string> b = NewNonce();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->size() == kNonceBytes);
  CHECK(*a != *b);
}

TEST_CASE("challenge proof binds the secret, role, context and both nonces", "[crypto]") {
  const std::string c(kNonceBytes, 'c');
  const std::string s(kNonceBytes, 's');
  const Digest base = ChallengeProof("secret", ProofRole::kClient, "store/2", c, s);
  CHECK(base == ChallengeProof("secret", ProofRole::kClient, "store/2", c, s));
  CHECK(base != ChallengeProof("Secret", ProofRole::kClient, "store/2", c, s));
  CHECK(base != ChallengeProof("secret", ProofRole::kServer, "store/2", c, s));
  CHECK(base != ChallengeProof("secret", ProofRole::kClient, "store/3", c, s));
  CHECK(base != ChallengeProof("secret", ProofRole::kClient, "store/2", s, c));
  CHECK(base != ChallengeProof("secret", ProofRole::kClient, "store/2", c, s + "x"));
  // Fields are length-prefixed: moving a byte from one field to the next changes the proof.
  CHECK(ChallengeProof("k", ProofRole::kClient, "ab", "c", "d") !=
        ChallengeProof("k", ProofRole::kClient, "a", "bc", "d"));
  // The empty secret is a key like any other (no authentication, but the same exchange).
  CHECK(ChallengeProof("", ProofRole::kClient, "x", c, s) !=
        ChallengeProof("secret", ProofRole::kClient, "x", c, s));
}

}  // namespace
}  // namespace braid::crypto
