// The wire protocol between TcpStoreClient and TcpStoreServer (docs/STORE_PROTOCOL.md).
//
// Why a separate, pure layer: everything that turns untrusted bytes into requests lives here, as
// functions over a byte buffer with no sockets, no clocks and no global state, so tests (and later
// a fuzzer) can drive it directly. The server only moves bytes; it never looks inside a frame
// except through ParseHeader / DecodeRequest.
//
// Frame = 16-byte header + body. Header, all integers big-endian:
//   u32 magic ("BRST") | u16 version | u16 kind | u32 request_id | u32 body_bytes
// `kind` is the op for a request and op | kResponseFlag for its response. Every length is checked
// against Limits before anything is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace braid::rendezvous::protocol {

inline constexpr uint32_t kMagic = 0x42525354;  // "BRST"
// Version 2: HELLO/AUTH challenge-response instead of a secret in clear (see "Authentication" in
// docs/STORE_PROTOCOL.md).
inline constexpr uint16_t kVersion = 2;
inline constexpr size_t kHeaderBytes = 16;
inline constexpr uint16_t kResponseFlag = 0x8000;
// Room for keys, counts and lengths on top of the largest value in one request frame.
inline constexpr size_t kFrameOverheadBytes = size_t{1} << 20;
// Largest response body a server builds and a client accepts (MULTI_GET, LIST_KEYS can be big).
inline constexpr size_t kMaxResponseBodyBytes = size_t{1} << 30;
// Nonces and proofs of the handshake are exactly this long (SHA-256 size).
inline constexpr size_t kAuthBytes = 32;
// Largest request body a server accepts before the connection has authenticated: a stranger can
// make it buffer no more than this.
inline constexpr size_t kMaxHandshakeBodyBytes = 256;
// The `context` of the store's challenge proofs (core/base/hmac_sha256.h, ChallengeProof): binds a
// proof to this protocol and version.
inline constexpr char kAuthContext[] = "braid-store/2";
// A timeout_ms of kNoTimeout in GET/WAIT/MULTI_GET/BARRIER means "wait until answered".
inline constexpr int64_t kNoTimeout = -1;

enum class Op : uint16_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kWait = 6,
  kCheck = 7,
  kDeleteKey = 8,
  kNumKeys = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kAppend = 12,
  kListKeys = 13,
  kBarrier = 14,
  kAuth = 15,
};

// "SET", "GET", ...; "UNKNOWN(n)" is not returned: unknown ops give "UNKNOWN".
const char* OpName(Op op);
bool IsKnownOp(uint16_t kind);
// Ops the server may park (answered later, when keys appear or `n` callers arrive).
bool IsBlockingOp(Op op);

struct Limits {
  size_t max_key_bytes = 64 * 1024;
  size_t max_value_bytes = size_t{64} << 20;
  size_t max_keys = size_t{1} << 20;  // keys in one WAIT/CHECK/MULTI_GET/MULTI_SET
  // Largest request body accepted: the largest value plus kFrameOverheadBytes.
  size_t max_request_body_bytes() const { return max_value_bytes + kFrameOverheadBytes; }
};

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t kind = 0;
  uint32_t request_id = 0;
  uint32_t body_bytes = 0;
};

// Why a header is rejected; the server's reaction differs (a wrong version gets an error reply
// the peer can print, a wrong magic gets nothing since the peer does not speak this protocol).
enum class HeaderError { kNone, kBadMagic, kBadVersion, kBadKind, kTooLong };

struct HeaderCheck {
  HeaderError error = HeaderError::kNone;
  FrameHeader header;
  std::string message;  // set when error != kNone
};

// Decodes kHeaderBytes bytes (size must be >= kHeaderBytes) and checks magic, version, kind and
// body length. `max_body_bytes` bounds body_bytes; `expect_response` selects which kinds are
// legal (requests: known ops; responses: known ops with kResponseFlag).
HeaderCheck ParseHeader(const uint8_t* data, size_t size, size_t max_body_bytes,
                        bool expect_response);

// One request, decoded. Field use per op (docs/STORE_PROTOCOL.md has the byte layout):
//   HELLO: nonce (the client's).  AUTH: proof (the client's).
//   SET/APPEND: keys[0], values[0].  GET: keys[0], timeout_ms.
//   ADD: keys[0], number (delta).  COMPARE_SET: keys[0], values[0] (expected), values[1] (desired).
//   WAIT/MULTI_GET: keys, timeout_ms.  CHECK: keys.  DELETE_KEY: keys[0].
//   MULTI_SET: keys, values (same count).  BARRIER: keys[0], number (n), timeout_ms.
//   NUM_KEYS, LIST_KEYS: nothing.
struct Request {
  Op op = Op::kHello;
  uint32_t request_id = 0;
  std::string nonce;  // HELLO: kAuthBytes
  std::string proof;  // AUTH: kAuthBytes
  std::vector<std::string> keys;
  std::vector<std::string> values;
  int64_t number = 0;
  int64_t timeout_ms = kNoTimeout;
};

// Decodes a request body for `header` (already accepted by ParseHeader). Fails with
// kInvalidArgument naming the op and the field on truncation, trailing bytes, a count or length
// beyond `limits`, or a bad number (negative timeout other than kNoTimeout, barrier n < 1).
Result<Request> DecodeRequest(const FrameHeader& header, const uint8_t* body, size_t size,
                              const Limits& limits);

// The whole-buffer parser: the entry point for fuzzing. Looks at the front of `data` and reports
// whether a complete, valid request frame is there.
struct ParsedFrame {
  enum class State { kNeedMore, kFrame, kError };
  State state = State::kNeedMore;
  size_t consumed = 0;  // bytes of the frame (kFrame only)
  Request request;      // kFrame only
  Status error;         // kError only
};
ParsedFrame ParseRequestFrame(const uint8_t* data, size_t size, const Limits& limits);

// Whole frame (header + body).
std::string EncodeRequest(const Request& request);

// A reply. `code` is a braid::Code; on a non-OK code only `message` travels.
// Payload per op: GET/COMPARE_SET: values[0]. ADD/NUM_KEYS: number. CHECK/DELETE_KEY: number 0/1.
// MULTI_GET: values. LIST_KEYS: values (the keys). HELLO: values[0] (server nonce), values[1]
// (server proof), both kAuthBytes. AUTH: number (server's max_value_bytes). Others: nothing.
struct Response {
  Code code = Code::kOk;
  std::string message;
  std::vector<std::string> values;
  int64_t number = 0;
};

// Whole frame. Fails (kInvalidArgument) only if the body would exceed kMaxResponseBodyBytes.
Result<std::string> EncodeResponse(Op op, uint32_t request_id, const Response& response);
Result<Response> DecodeResponse(Op op, const uint8_t* body, size_t size);

// Size of the request frame EncodeRequest would build, without building it (the client checks it
// against the server's limit before sending).
size_t EncodedRequestBytes(const Request& request);

// Keys are arbitrary bytes; messages show them quoted, non-printable bytes as \xNN, long keys
// cut at 120 bytes, lists cut after 10 keys ("'a', 'b' and 3 more").
std::string PrintableKey(const std::string& key);
std::string PrintableKeys(const std::vector<std::string>& keys);

}  // namespace braid::rendezvous::protocol
