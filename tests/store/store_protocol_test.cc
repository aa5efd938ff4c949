// The pure frame parser: round trips for every op, and rejection (never a crash) of truncated,
// oversized, trailing and random input.
#include "rendezvous/store_protocol.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace braid::rendezvous::protocol {
namespace {

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

Request Make(Op op) {
  Request q;
  q.op = op;
  q.request_id = 77;
  switch (op) {
    case Op::kHello:
      q.nonce = std::string(kAuthBytes, 'n');
      break;
    case Op::kAuth:
      q.proof = std::string(kAuthBytes, '\x9c');
      break;
    case Op::kSet:
    case Op::kAppend:
      q.keys = {"k"};
      q.values = {std::string("v\0w", 3)};
      break;
    case Op::kGet:
      q.keys = {"k"};
      q.timeout_ms = 1234;
      break;
    case Op::kAdd:
      q.keys = {"k"};
      q.number = -5;
      break;
    case Op::kCompareSet:
      q.keys = {"k"};
      q.values = {"", "new"};
      break;
    case Op::kWait:
    case Op::kMultiGet:
      q.keys = {"a", "", "c"};
      q.timeout_ms = kNoTimeout;
      break;
    case Op::kCheck:
      q.keys = {"a", "b"};
      break;
    case Op::kDeleteKey:
      q.keys = {"gone"};
      break;
    case Op::kNumKeys:
    case Op::kListKeys:
      break;
    case Op::kMultiSet:
      q.keys = {"a", "b"};
      q.values = {"1", ""};
      break;
    case Op::kBarrier:
      q.keys = {"bar"};
      q.number = 4;
      q.timeout_ms = 0;
      break;
  }
  return q;
}

const Op kAllOps[] = {Op::kHello,    Op::kSet,    Op::kGet,       Op::kAdd,     Op::kCompareSet,
                      Op::kWait,     Op::kCheck,  Op::kDeleteKey, Op::kNumKeys, Op::kMultiGet,
                      Op::kMultiSet, Op::kAppend, Op::kListKeys,  Op::kBarrier,
                      Op::kAuth};

TEST_CASE("every request round-trips through the frame parser", "[store][protocol]") {
  Limits limits;
  for (Op op : kAllOps) {
    INFO(OpName(op));
    Request q = Make(op);
    std::string frame = EncodeRequest(q);
    CHECK(frame.size() == EncodedRequestBytes(q));
    ParsedFrame parsed = ParseRequestFrame(Bytes(frame), frame.size(), limits);
    REQUIRE(parsed.state == ParsedFrame::State::kFrame);
    CHECK(parsed.consumed == frame.size());
    const Request& r = parsed.request;
    CHECK(r.op == q.op);
    CHECK(r.request_id == 77);
    CHECK(r.nonce == q.nonce);
    CHECK(r.proof == q.proof);
    CHECK(r.keys == q.keys);
    CHECK(r.values == q.values);
    CHECK(r.number == q.number);
    if (IsBlockingOp(op)) CHECK(r.timeout_ms == q.timeout_ms);

    // Every strict prefix is "need more"; a frame followed by more bytes parses just the frame.
    for (size_t cut = 0; cut < frame.size(); ++cut) {
      ParsedFrame partial = ParseRequestFrame(Bytes(frame), cut, limits);
      if (partial.state != ParsedFrame::State::kNeedMore)
        FAIL("prefix " << cut << " not kNeedMore");
    }
    std::string two = frame + frame;
    CHECK(ParseRequestFrame(Bytes(two), two.size(), limits).consumed == frame.size());
  }
}

TEST_CASE("responses round-trip", "[store][protocol]") {
  Response ok;
  ok.values = {"x", std::string(3, '\0')};
  ok.number = 42;
  for (Op op : kAllOps) {
    INFO(OpName(op));
    Response r = ok;
    if (op == Op::kGet || op == Op::kCompareSet) r.values = {"value"};
    if (op == Op::kCheck || op == Op::kDeleteKey) r.number = 1;
    if (op == Op::kHello) r.values = {std::string(kAuthBytes, 'a'), std::string(kAuthBytes, 'b')};
    Result<std::string> frame = EncodeResponse(op, 9, r);
    REQUIRE(frame.ok());
    HeaderCheck check = ParseHeader(Bytes(*frame), frame->size(), kMaxResponseBodyBytes, true);
    REQUIRE(check.error == HeaderError::kNone);
    CHECK(check.header.kind == (static_cast<uint16_t>(op) | kResponseFlag));
    CHECK(check.header.request_id == 9);
    REQUIRE(check.header.body_bytes == frame->size() - kHeaderBytes);
    Result<Response> back =
        DecodeResponse(op, Bytes(*frame) + kHeaderBytes, check.header.body_bytes);
    REQUIRE(back.ok());
    CHECK(back->code == Code::kOk);
    switch (op) {
      case Op::kGet:
      case Op::kCompareSet:
      case Op::kMultiGet:
      case Op::kListKeys:
      case Op::kHello:
        CHECK(back->values == r.values);
        break;
      case Op::kAdd:
      case Op::kNumKeys:
      case Op::kAuth:
      case Op::kCheck:
      case Op::kDeleteKey:
        CHECK(back->number == r.number);
        break;
      default:
        CHECK(back->values.empty());
        break;
    }
    // An error reply carries code and message only.
    Response err;
    err.code = Code::kTimeout;
    err.message = "timed out waiting for key 'k'";
    frame = EncodeResponse(op, 10, err);
    REQUIRE(frame.ok());
    back = DecodeResponse(op, Bytes(*frame) + kHeaderBytes, frame->size() - kHeaderBytes);
    REQUIRE(back.ok());
    CHECK(back->code == Code::kTimeout);
    CHECK(back->message == err.message);
  }
}

std::string Header(uint32_t magic, uint16_t version, uint16_t kind, uint32_t id, uint32_t len) {
  std::string h;
  for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>(magic >> s));
  h.push_back(static_cast<char>(version >> 8));
  h.push_back(static_cast<char>(version));
  h.push_back(static_cast<char>(kind >> 8));
  h.push_back(static_cast<char>(kind));
  for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>(id >> s));
  for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>(len >> s));
  return h;
}

TEST_CASE("bad headers are rejected with a reason", "[store][protocol]") {
  Limits limits;
  auto check = [&](const std::string& h) {
    return ParseHeader(Bytes(h), h.size(), limits.max_request_body_bytes(), false);
  };
  HeaderCheck c = check(Header(0xdeadbeef, kVersion, 2, 1, 0));
  CHECK(c.error == HeaderError::kBadMagic);
  CHECK_THAT(c.message, Catch::Contains("magic"));
  c = check(Header(kMagic, 99, 2, 1, 0));
  CHECK(c.error == HeaderError::kBadVersion);
  CHECK_THAT(c.message, Catch::Contains("version 99"));
  c = check(Header(kMagic, kVersion, 0, 1, 0));
  CHECK(c.error == HeaderError::kBadKind);
  c = check(Header(kMagic, kVersion, 200, 1, 0));
  CHECK(c.error == HeaderError::kBadKind);
  c = check(Header(kMagic, kVersion, 2 | kResponseFlag, 1, 0));  // a response where a request goes
  CHECK(c.error == HeaderError::kBadKind);
  c = check(Header(kMagic, kVersion, 2, 1, 0xffffffffu));
  CHECK(c.error == HeaderError::kTooLong);
  CHECK_THAT(c.message, Catch::Contains("exceeds"));
  c = check(Header(kMagic, kVersion, 2, 1, static_cast<uint32_t>(limits.max_request_body_bytes())));
  CHECK(c.error == HeaderError::kNone);
  // The whole-frame parser reports the header error without waiting for the body.
  std::string absurd = Header(kMagic, kVersion, 2, 1, 0xffffffffu);
  CHECK(ParseRequestFrame(Bytes(absurd), absurd.size(), limits).state ==
        ParsedFrame::State::kError);
}

TEST_CASE("bodies with bad lengths, counts or trailing bytes are rejected", "[store][protocol]") {
  Limits limits;
  limits.max_key_bytes = 8;
  limits.max_value_bytes = 16;
  limits.max_keys = 3;
  auto decode = [&](uint16_t op, const std::string& body) {
    return ParseRequestFrame(
        Bytes(Header(kMagic, kVersion, op, 1, static_cast<uint32_t>(body.size())) + body),
        kHeaderBytes + body.size(), limits);
  };
  auto u32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  auto i64 = [&](int64_t v) {
    return u32(static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32)) +
           u32(static_cast<uint32_t>(v));
  };
  using S = ParsedFrame::State;
  // SET: key length larger than the body.
  ParsedFrame f = decode(2, u32(5) + "ab");
  CHECK(f.state == S::kError);
  CHECK_THAT(f.error.message(), Catch::Contains("SET"));
  // Key beyond the key limit, value beyond the value limit.
  CHECK(decode(2, u32(9) + std::string(9, 'k') + u32(0)).state == S::kError);
  CHECK(decode(2, u32(1) + "k" + u32(17) + std::string(17, 'v')).state == S::kError);
  CHECK(decode(2, u32(1) + "k" + u32(16) + std::string(16, 'v')).state == S::kFrame);
  // Trailing bytes.
  CHECK(decode(2, u32(1) + "k" + u32(1) + "v" + "x").state == S::kError);
  // A huge count with few bytes behind it must fail before allocating.
  f = decode(7, u32(0xfffffff0u));
  CHECK(f.state == S::kError);
  CHECK(decode(7, u32(4) + u32(0) + u32(0) + u32(0) + u32(0)).state == S::kError);  // > max_keys
  CHECK(decode(7, u32(3) + u32(0) + u32(0) + u32(0)).state == S::kFrame);
  CHECK(decode(11, u32(1000000) + u32(0)).state == S::kError);
  // Negative timeouts other than "no timeout", and barrier n < 1.
  CHECK(decode(3, i64(-2) + u32(1) + "k").state == S::kError);
  CHECK(decode(3, i64(kNoTimeout) + u32(1) + "k").state == S::kFrame);
  CHECK(decode(14, i64(0) + u32(1) + "k" + i64(0)).state == S::kError);
  CHECK(decode(14, i64(0) + u32(1) + "k" + i64(1)).state == S::kFrame);
  // HELLO nonces and AUTH proofs are exactly kAuthBytes.
  CHECK(decode(1, u32(5000) + std::string(5000, 's')).state == S::kError);
  CHECK(decode(1, u32(31) + std::string(31, 's')).state == S::kError);
  CHECK(decode(1, u32(32) + std::string(32, 's')).state == S::kFrame);
  CHECK(decode(15, u32(0)).state == S::kError);
  CHECK(decode(15, u32(32) + std::string(32, 'p')).state == S::kFrame);
  CHECK(decode(15, u32(32) + std::string(33, 'p')).state == S::kError);
}

TEST_CASE("random and mutated input never crashes the parser", "[store][protocol]") {
  Limits limits;
  limits.max_value_bytes = 1 << 16;
  std::mt19937 rng(12345);
  std::vector<std::string> seeds;
  for (Op op : kAllOps) seeds.push_back(EncodeRequest(Make(op)));
  int frames = 0, errors = 0, need_more = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string buf = seeds[rng() % seeds.size()];
    int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      switch (rng() % 4) {
        case 0:
          buf[rng() % buf.size()] = static_cast<char>(rng());
          break;
        case 1:
          buf.resize(rng() % (buf.size() + 1));
          if (buf.empty()) buf = "x";
          break;
        case 2:
          buf.insert(buf.begin() + static_cast<long>(rng() % buf.size()), static_cast<char>(rng()));
          break;
        case 3:  // the body length field
          if (buf.size() >= kHeaderBytes)
            buf[12 + rng() % 4] ^= static_cast<char>(1u << (rng() % 8));
          break;
      }
    }
    ParsedFrame f = ParseRequestFrame(Bytes(buf), buf.size(), limits);
    if (f.state == ParsedFrame::State::kFrame) {
      ++frames;
      if (f.consumed > buf.size()) FAIL("consumed past the buffer");
    } else if (f.state == ParsedFrame::State::kError) {
      ++errors;
      if (f.error.ok()) FAIL("error state with OK status");
    } else {
      ++need_more;
    }
    // Responses too.
    if (buf.size() > kHeaderBytes) {
      (void)DecodeResponse(static_cast<Op>(1 + rng() % 15), Bytes(buf) + kHeaderBytes,
                           buf.size() - kHeaderBytes);
    }
  }
  CHECK(frames + errors + need_more == 20000);
  CHECK(errors > 0);
}

}  // namespace
}  // namespace braid::rendezvous::protocol
