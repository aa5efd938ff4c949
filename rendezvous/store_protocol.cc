#include "rendezvous/store_protocol.h"

#include <cstdio>
#include <cstring>

namespace braid::rendezvous::protocol {
namespace {

// ---- encoding ----

void PutU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }
void PutU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}
void PutU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}
void PutU64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}
void PutI64(std::string* out, int64_t v) { PutU64(out, static_cast<uint64_t>(v)); }
void PutBytes(std::string* out, const std::string& s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}
void PutList(std::string* out, const std::vector<std::string>& list) {
  PutU32(out, static_cast<uint32_t>(list.size()));
  for (const std::string& s : list) PutBytes(out, s);
}

void PutHeader(std::string* out, uint16_t kind, uint32_t request_id, uint32_t body_bytes) {
  PutU32(out, kMagic);
  PutU16(out, kVersion);
  PutU16(out, kind);
  PutU32(out, request_id);
  PutU32(out, body_bytes);
}

size_t ListBytes(const std::vector<std::string>& list) {
  size_t n = 4;
  for (const std::string& s : list) n += 4 + s.size();
  return n;
}

// ---- decoding: a cursor that never reads past `end_` and never allocates before checking ----

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  size_t left() const { return static_cast<size_t>(end_ - p_); }

  bool U8(uint8_t* v) {
    if (left() < 1) return false;
    *v = *p_++;
    return true;
  }
  bool U32(uint32_t* v) {
    if (left() < 4) return false;
    *v = (uint32_t{p_[0]} << 24) | (uint32_t{p_[1]} << 16) | (uint32_t{p_[2]} << 8) | p_[3];
    p_ += 4;
    return true;
  }
  bool I64(int64_t* v) {
    if (left() < 8) return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u = (u << 8) | p_[i];
    p_ += 8;
    *v = static_cast<int64_t>(u);
    return true;
  }
  // A u32 length and that many bytes, the length at most `max`.
  Status Bytes(std::string* out, size_t max, const char* what) {
    uint32_t n = 0;
    if (!U32(&n)) return Truncated(what);
    if (n > max) {
      return Status::InvalidArgument(std::string(what) + " of " + std::to_string(n) +
                                     " bytes exceeds the limit of " + std::to_string(max));
    }
    if (left() < n) return Truncated(what);
    out->assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return Status::Ok();
  }
  // A u32 count; each element needs at least `min_element_bytes`, so the count is checked against
  // the bytes left before any vector is sized.
  Status Count(uint32_t* n, size_t max, size_t min_element_bytes, const char* what) {
    if (!U32(n)) return Truncated(what);
    if (*n > max) {
      return Status::InvalidArgument(std::string(what) + " " + std::to_string(*n) +
                                     " exceeds the limit of " + std::to_string(max));
    }
    if (static_cast<uint64_t>(*n) * min_element_bytes > left()) return Truncated(what);
    return Status::Ok();
  }
  static Status Truncated(const char* what) {
    return Status::InvalidArgument(std::string("truncated at ") + what);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

Status ReadTimeout(Reader* r, int64_t* timeout_ms) {
  if (!r->I64(timeout_ms)) return Reader::Truncated("timeout_ms");
  if (*timeout_ms < 0 && *timeout_ms != kNoTimeout) {
    return Status::InvalidArgument("negative timeout_ms " + std::to_string(*timeout_ms));
  }
  return Status::Ok();
}

Status ReadKeys(Reader* r, const Limits& limits, std::vector<std::string>* keys) {
  uint32_t n = 0;
  BRAID_RETURN_IF_ERROR(r->Count(&n, limits.max_keys, 4, "key count"));
  keys->resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    BRAID_RETURN_IF_ERROR(r->Bytes(&(*keys)[i], limits.max_key_bytes, "key"));
  }
  return Status::Ok();
}

// A nonce or proof: exactly kAuthBytes.
Status ReadAuthBytes(Reader* r, std::string* out, const char* what) {
  BRAID_RETURN_IF_ERROR(r->Bytes(out, kAuthBytes, what));
  if (out->size() != kAuthBytes) {
    return Status::InvalidArgument(std::string(what) + " of " + std::to_string(out->size()) +
                                   " bytes (must be " + std::to_string(kAuthBytes) + ")");
  }
  return Status::Ok();
}

Status DecodeRequestBody(Reader* r, const Limits& limits, Request* q) {
  std::string s;
  switch (q->op) {
    case Op::kHello:
      return ReadAuthBytes(r, &q->nonce, "nonce");
    case Op::kAuth:
      return ReadAuthBytes(r, &q->proof, "proof");
    case Op::kSet:
    case Op::kAppend:
      q->keys.resize(1);
      q->values.resize(1);
      BRAID_RETURN_IF_ERROR(r->Bytes(&q->keys[0], limits.max_key_bytes, "key"));
      return r->Bytes(&q->values[0], limits.max_value_bytes, "value");
    case Op::kGet:
      BRAID_RETURN_IF_ERROR(ReadTimeout(r, &q->timeout_ms));
      q->keys.resize(1);
      return r->Bytes(&q->keys[0], limits.max_key_bytes, "key");
    case Op::kAdd:
      q->keys.resize(1);
      BRAID_RETURN_IF_ERROR(r->Bytes(&q->keys[0], limits.max_key_bytes, "key"));
      if (!r->I64(&q->number)) return Reader::Truncated("delta");
      return Status::Ok();
    case Op::kCompareSet:
      q->keys.resize(1);
      q->values.resize(2);
      BRAID_RETURN_IF_ERROR(r->Bytes(&q->keys[0], limits.max_key_bytes, "key"));
      BRAID_RETURN_IF_ERROR(r->Bytes(&q->values[0], limits.max_value_bytes, "expected value"));
      return r->Bytes(&q->values[1], limits.max_value_bytes, "desired value");
    case Op::kWait:
    case Op::kMultiGet:
      BRAID_RETURN_IF_ERROR(ReadTimeout(r, &q->timeout_ms));
      return ReadKeys(r, limits, &q->keys);
    case Op::kCheck:
      return ReadKeys(r, limits, &q->keys);
    case Op::kDeleteKey:
      q->keys.resize(1);
      return r->Bytes(&q->keys[0], limits.max_key_bytes, "key");
    case Op::kNumKeys:
    case Op::kListKeys:
      return Status::Ok();
    case Op::kMultiSet: {
      uint32_t n = 0;
      BRAID_RETURN_IF_ERROR(r->Count(&n, limits.max_keys, 8, "pair count"));
      q->keys.resize(n);
      q->values.resize(n);
      for (uint32_t i = 0; i < n; ++i) {
        BRAID_RETURN_IF_ERROR(r->Bytes(&q->keys[i], limits.max_key_bytes, "key"));
        BRAID_RETURN_IF_ERROR(r->Bytes(&q->values[i], limits.max_value_bytes, "value"));
      }
      return Status::Ok();
    }
    case Op::kBarrier:
      BRAID_RETURN_IF_ERROR(ReadTimeout(r, &q->timeout_ms));
      q->keys.resize(1);
      BRAID_RETURN_IF_ERROR(r->Bytes(&q->keys[0], limits.max_key_bytes, "key"));
      if (!r->I64(&q->number)) return Reader::Truncated("n");
      if (q->number < 1 || q->number > INT32_MAX) {
        return Status::InvalidArgument("barrier n " + std::to_string(q->number) +
                                       " is outside [1, 2^31)");
      }
      return Status::Ok();
  }
  return Status::InvalidArgument("unknown op");
}

}  // namespace

std::string PrintableKey(const std::string& key) {
  std::string out = "'";
  size_t shown = key.size() < 120 ? key.size() : 120;
  for (size_t i = 0; i < shown; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (shown < key.size()) out += "...(" + std::to_string(key.size()) + " bytes)";
  return out + "'";
}

std::string PrintableKeys(const std::vector<std::string>& keys) {
  std::string out;
  size_t shown = keys.size() < 10 ? keys.size() : 10;
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + PrintableKey(keys[i]);
  if (shown < keys.size()) out += " and " + std::to_string(keys.size() - shown) + " more";
  return out;
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kHello:
      return "HELLO";
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kWait:
      return "WAIT";
    case Op::kCheck:
      return "CHECK";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kNumKeys:
      return "NUM_KEYS";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kAppend:
      return "APPEND";
    case Op::kListKeys:
      return "LIST_KEYS";
    case Op::kBarrier:
      return "BARRIER";
    case Op::kAuth:
      return "AUTH";
  }
  return "UNKNOWN";
}

bool IsKnownOp(uint16_t kind) {
  return kind >= static_cast<uint16_t>(Op::kHello) && kind <= static_cast<uint16_t>(Op::kAuth);
}

bool IsBlockingOp(Op op) {
  return op == Op::kGet || op == Op::kWait || op == Op::kMultiGet || op == Op::kBarrier;
}

HeaderCheck ParseHeader(const uint8_t* data, size_t size, size_t max_body_bytes,
                        bool expect_response) {
  HeaderCheck check;
  if (size < kHeaderBytes) {  // a caller error; still never read past `size`
    check.error = HeaderError::kBadMagic;
    check.message = "header shorter than " + std::to_string(kHeaderBytes) + " bytes";
    return check;
  }
  Reader r(data, size);
  FrameHeader& h = check.header;
  uint32_t version_and_kind = 0;
  r.U32(&h.magic);
  r.U32(&version_and_kind);
  h.version = static_cast<uint16_t>(version_and_kind >> 16);
  h.kind = static_cast<uint16_t>(version_and_kind & 0xffff);
  r.U32(&h.request_id);
  r.U32(&h.body_bytes);
  char buf[96];
  if (h.magic != kMagic) {
    check.error = HeaderError::kBadMagic;
    std::snprintf(buf, sizeof(buf), "bad magic 0x%08x (expected 0x%08x, \"BRST\")", h.magic,
                  kMagic);
    check.message = buf;
    return check;
  }
  if (h.version != kVersion) {
    check.error = HeaderError::kBadVersion;
    check.message = "unsupported store protocol version " + std::to_string(h.version) +
                    " (this build speaks version " + std::to_string(kVersion) + ")";
    return check;
  }
  bool is_response = (h.kind & kResponseFlag) != 0;
  uint16_t op = h.kind & static_cast<uint16_t>(~kResponseFlag);
  if (is_response != expect_response || !IsKnownOp(op)) {
    check.error = HeaderError::kBadKind;
    std::snprintf(buf, sizeof(buf), "unexpected frame kind 0x%04x (expected a %s)", h.kind,
                  expect_response ? "response" : "request");
    check.message = buf;
    return check;
  }
  if (h.body_bytes > max_body_bytes) {
    check.error = HeaderError::kTooLong;
    check.message = "frame body of " + std::to_string(h.body_bytes) +
                    " bytes exceeds the limit of " + std::to_string(max_body_bytes);
    return check;
  }
  return check;
}

Result<Request> DecodeRequest(const FrameHeader& header, const uint8_t* body, size_t size,
                              const Limits& limits) {
  uint16_t op = header.kind;
  if ((op & kResponseFlag) != 0 || !IsKnownOp(op)) {
    return Status::InvalidArgument("not a request kind: " + std::to_string(header.kind));
  }
  Request q;
  q.op = static_cast<Op>(op);
  q.request_id = header.request_id;
  Reader r(body, size);
  Status s = DecodeRequestBody(&r, limits, &q);
  if (s.ok() && r.left() != 0) {
    s = Status::InvalidArgument(std::to_string(r.left()) + " trailing bytes");
  }
  if (!s.ok()) return s.WithContext(std::string("malformed ") + OpName(q.op) + " request");
  return q;
}

ParsedFrame ParseRequestFrame(const uint8_t* data, size_t size, const Limits& limits) {
  ParsedFrame out;
  if (size < kHeaderBytes) return out;  // kNeedMore
  HeaderCheck check = ParseHeader(data, size, limits.max_request_body_bytes(), false);
  if (check.error != HeaderError::kNone) {
    out.state = ParsedFrame::State::kError;
    out.error = Status::InvalidArgument(check.message);
    return out;
  }
  if (size - kHeaderBytes < check.header.body_bytes) return out;  // kNeedMore
  Result<Request> request =
      DecodeRequest(check.header, data + kHeaderBytes, check.header.body_bytes, limits);
  if (!request.ok()) {
    out.state = ParsedFrame::State::kError;
    out.error = request.status();
    return out;
  }
  out.state = ParsedFrame::State::kFrame;
  out.consumed = kHeaderBytes + check.header.body_bytes;
  out.request = std::move(request).value();
  return out;
}

size_t EncodedRequestBytes(const Request& q) {
  size_t n = 0;
  switch (q.op) {
    case Op::kHello:
      n = 4 + q.nonce.size();
      break;
    case Op::kAuth:
      n = 4 + q.proof.size();
      break;
    case Op::kSet:
    case Op::kAppend:
      n = 8 + q.keys[0].size() + q.values[0].size();
      break;
    case Op::kGet:
      n = 8 + 4 + q.keys[0].size();
      break;
    case Op::kAdd:
      n = 4 + q.keys[0].size() + 8;
      break;
    case Op::kCompareSet:
      n = 12 + q.keys[0].size() + q.values[0].size() + q.values[1].size();
      break;
    case Op::kWait:
    case Op::kMultiGet:
      n = 8 + ListBytes(q.keys);
      break;
    case Op::kCheck:
      n = ListBytes(q.keys);
      break;
    case Op::kDeleteKey:
      n = 4 + q.keys[0].size();
      break;
    case Op::kNumKeys:
    case Op::kListKeys:
      n = 0;
      break;
    case Op::kMultiSet:
      n = ListBytes(q.keys) + ListBytes(q.values) - 4;
      break;
    case Op::kBarrier:
      n = 8 + 4 + q.keys[0].size() + 8;
      break;
  }
  return kHeaderBytes + n;
}

std::string EncodeRequest(const Request& q) {
  std::string body;
  switch (q.op) {
    case Op::kHello:
      PutBytes(&body, q.nonce);
      break;
    case Op::kAuth:
      PutBytes(&body, q.proof);
      break;
    case Op::kSet:
    case Op::kAppend:
      PutBytes(&body, q.keys.at(0));
      PutBytes(&body, q.values.at(0));
      break;
    case Op::kGet:
      PutI64(&body, q.timeout_ms);
      PutBytes(&body, q.keys.at(0));
      break;
    case Op::kAdd:
      PutBytes(&body, q.keys.at(0));
      PutI64(&body, q.number);
      break;
    case Op::kCompareSet:
      PutBytes(&body, q.keys.at(0));
      PutBytes(&body, q.values.at(0));
      PutBytes(&body, q.values.at(1));
      break;
    case Op::kWait:
    case Op::kMultiGet:
      PutI64(&body, q.timeout_ms);
      PutList(&body, q.keys);
      break;
    case Op::kCheck:
      PutList(&body, q.keys);
      break;
    case Op::kDeleteKey:
      PutBytes(&body, q.keys.at(0));
      break;
    case Op::kNumKeys:
    case Op::kListKeys:
      break;
    case Op::kMultiSet:
      PutU32(&body, static_cast<uint32_t>(q.keys.size()));
      for (size_t i = 0; i < q.keys.size(); ++i) {
        PutBytes(&body, q.keys[i]);
        PutBytes(&body, q.values.at(i));
      }
      break;
    case Op::kBarrier:
      PutI64(&body, q.timeout_ms);
      PutBytes(&body, q.keys.at(0));
      PutI64(&body, q.number);
      break;
  }
  std::string frame;
  frame.reserve(kHeaderBytes + body.size());
  PutHeader(&frame, static_cast<uint16_t>(q.op), q.request_id, static_cast<uint32_t>(body.size()));
  frame += body;
  return frame;
}

Result<std::string> EncodeResponse(Op op, uint32_t request_id, const Response& response) {
  size_t body_bytes = 1;
  if (response.code != Code::kOk) {
    body_bytes += 4 + response.message.size();
  } else {
    switch (op) {
      case Op::kGet:
      case Op::kCompareSet:
        body_bytes += 4 + response.values.at(0).size();
        break;
      case Op::kAdd:
      case Op::kNumKeys:
      case Op::kAuth:
        body_bytes += 8;
        break;
      case Op::kHello:
        body_bytes += 8 + response.values.at(0).size() + response.values.at(1).size();
        break;
      case Op::kCheck:
      case Op::kDeleteKey:
        body_bytes += 1;
        break;
      case Op::kMultiGet:
      case Op::kListKeys:
        body_bytes += ListBytes(response.values);
        break;
      default:
        break;
    }
  }
  if (body_bytes > kMaxResponseBodyBytes) {
    return Status::InvalidArgument(std::string(OpName(op)) + " response of " +
                                   std::to_string(body_bytes) + " bytes exceeds the limit of " +
                                   std::to_string(kMaxResponseBodyBytes));
  }
  std::string frame;
  frame.reserve(kHeaderBytes + body_bytes);
  PutHeader(&frame, static_cast<uint16_t>(op) | kResponseFlag, request_id,
            static_cast<uint32_t>(body_bytes));
  PutU8(&frame, static_cast<uint8_t>(response.code));
  if (response.code != Code::kOk) {
    PutBytes(&frame, response.message);
    return frame;
  }
  switch (op) {
    case Op::kGet:
    case Op::kCompareSet:
      PutBytes(&frame, response.values.at(0));
      break;
    case Op::kAdd:
    case Op::kNumKeys:
    case Op::kAuth:
      PutI64(&frame, response.number);
      break;
    case Op::kHello:
      PutBytes(&frame, response.values.at(0));
      PutBytes(&frame, response.values.at(1));
      break;
    case Op::kCheck:
    case Op::kDeleteKey:
      PutU8(&frame, response.number != 0 ? 1 : 0);
      break;
    case Op::kMultiGet:
    case Op::kListKeys:
      PutList(&frame, response.values);
      break;
    default:
      break;
  }
  return frame;
}

Result<Response> DecodeResponse(Op op, const uint8_t* body, size_t size) {
  Reader r(body, size);
  Response out;
  uint8_t code = 0;
  auto malformed = [&](const Status& s) {
    return s.WithContext(std::string("malformed ") + OpName(op) + " response");
  };
  if (!r.U8(&code)) return malformed(Reader::Truncated("status code"));
  if (code > static_cast<uint8_t>(Code::kAborted)) {
    return malformed(Status::InvalidArgument("unknown status code " + std::to_string(code)));
  }
  out.code = static_cast<Code>(code);
  Status s;
  if (out.code != Code::kOk) {
    s = r.Bytes(&out.message, kMaxResponseBodyBytes, "message");
  } else {
    switch (op) {
      case Op::kGet:
      case Op::kCompareSet:
        out.values.resize(1);
        s = r.Bytes(&out.values[0], kMaxResponseBodyBytes, "value");
        break;
      case Op::kAdd:
      case Op::kNumKeys:
      case Op::kAuth:
        if (!r.I64(&out.number)) s = Reader::Truncated("number");
        break;
      case Op::kHello:
        out.values.resize(2);
        s = ReadAuthBytes(&r, &out.values[0], "server nonce");
        if (s.ok()) s = ReadAuthBytes(&r, &out.values[1], "server proof");
        break;
      case Op::kCheck:
      case Op::kDeleteKey: {
        uint8_t flag = 0;
        if (!r.U8(&flag)) s = Reader::Truncated("flag");
        out.number = flag != 0 ? 1 : 0;
        break;
      }
      case Op::kMultiGet:
      case Op::kListKeys: {
        uint32_t n = 0;
        s = r.Count(&n, UINT32_MAX, 4, "count");
        if (!s.ok()) break;
        out.values.resize(n);
        for (uint32_t i = 0; i < n && s.ok(); ++i) {
          s = r.Bytes(&out.values[i], kMaxResponseBodyBytes, "value");
        }
        break;
      }
      default:
        break;
    }
  }
  if (s.ok() && r.left() != 0) {
    s = Status::InvalidArgument(std::to_string(r.left()) + " trailing bytes");
  }
  if (!s.ok()) return malformed(s);
  return out;
}

}  // namespace braid::rendezvous::protocol
