// libFuzzer target over the store's frame parser (rendezvous/store_protocol.h): everything a
// stranger's bytes reach before the server has authenticated it, and everything a client reads
// back. Built and run by tests/fuzz/run_store_fuzzer.sh (clang, ASan + UBSan), not by Bazel.
//
// Besides "no crash, no sanitizer report", it checks invariants, trapping on a violation:
//  - the parser never consumes past the buffer, and an error always carries a non-OK status;
//  - a parsed request re-encodes to exactly the bytes it was parsed from (the encoding is
//    canonical), and EncodedRequestBytes agrees with EncodeRequest;
//  - a decoded response survives an encode/decode round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "rendezvous/store_protocol.h"

namespace p = braid::rendezvous::protocol;

namespace {

void Require(bool condition) {
  if (!condition) __builtin_trap();
}

bool SameRequest(const p::Request& a, const p::Request& b) {
  return a.op == b.op && a.request_id == b.request_id && a.nonce == b.nonce &&
         a.proof == b.proof && a.keys == b.keys && a.values == b.values && a.number == b.number &&
         a.timeout_ms == b.timeout_ms;
}

bool SameResponse(const p::Response& a, const p::Response& b) {
  return a.code == b.code && a.message == b.message && a.values == b.values &&
         a.number == b.number;
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// Parses `data` as a stream of request frames, as the server does, checking each frame.
void ParseStream(const uint8_t* data, size_t size, const p::Limits& limits) {
  size_t at = 0;
  while (at < size) {
    p::ParsedFrame f = p::ParseRequestFrame(data + at, size - at, limits);
    if (f.state == p::ParsedFrame::State::kNeedMore) return;
    if (f.state == p::ParsedFrame::State::kError) {
      Require(!f.error.ok());
      return;
    }
    Require(f.consumed >= p::kHeaderBytes && f.consumed <= size - at);
    std::string encoded = p::EncodeRequest(f.request);
    Require(encoded.size() == p::EncodedRequestBytes(f.request));
    Require(encoded.size() == f.consumed);
    Require(std::memcmp(encoded.data(), data + at, f.consumed) == 0);
    p::ParsedFrame again = p::ParseRequestFrame(Bytes(encoded), encoded.size(), limits);
    Require(again.state == p::ParsedFrame::State::kFrame && SameRequest(again.request, f.request));
    (void)p::OpName(f.request.op);
    (void)p::PrintableKeys(f.request.keys);
    at += f.consumed;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The server's limits, and tiny ones so that every length and count check is reachable.
  p::Limits defaults;
  p::Limits tiny;
  tiny.max_key_bytes = 16;
  tiny.max_value_bytes = 64;
  tiny.max_keys = 4;
  ParseStream(data, size, defaults);
  ParseStream(data, size, tiny);

  if (size >= p::kHeaderBytes) {
    p::HeaderCheck request = p::ParseHeader(data, size, p::kMaxHandshakeBodyBytes, false);
    Require((request.error == p::HeaderError::kNone) == request.message.empty());
    p::HeaderCheck response = p::ParseHeader(data, size, p::kMaxResponseBodyBytes, true);
    Require((response.error == p::HeaderError::kNone) == response.message.empty());
    // The rest as a response body, for every op a client may be waiting on.
    for (uint16_t op = 1; op <= static_cast<uint16_t>(p::Op::kAuth); ++op) {
      braid::Result<p::Response> decoded = p::DecodeResponse(
          static_cast<p::Op>(op), data + p::kHeaderBytes, size - p::kHeaderBytes);
      if (!decoded.ok()) continue;
      braid::Result<std::string> frame = p::EncodeResponse(static_cast<p::Op>(op), 1, *decoded);
      Require(frame.ok());
      braid::Result<p::Response> back = p::DecodeResponse(
          static_cast<p::Op>(op), Bytes(*frame) + p::kHeaderBytes, frame->size() - p::kHeaderBytes);
      Require(back.ok());
      // (CHECK/DELETE_KEY flags decode any non-zero byte as 1, so the decoded form is canonical.)
      Require(SameResponse(*back, *decoded));
    }
  }
  (void)p::PrintableKey(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
