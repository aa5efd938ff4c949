// Writes the seed corpus of store_frame_fuzzer into the directory given as argv[1]: one valid
// request frame per op, a two-frame stream, and one reply per op (header + body, as a client
// reads it). Built and run by tests/fuzz/run_store_fuzzer.sh.
#include <cstdio>
#include <fstream>
#include <string>

#include "rendezvous/store_protocol.h"

namespace p = braid::rendezvous::protocol;

namespace {

p::Request Make(p::Op op) {
  p::Request q;
  q.op = op;
  q.request_id = 7;
  switch (op) {
    case p::Op::kHello:
      q.nonce = std::string(p::kAuthBytes, 'n');
      break;
    case p::Op::kAuth:
      q.proof = std::string(p::kAuthBytes, 'p');
      break;
    case p::Op::kSet:
    case p::Op::kAppend:
      q.keys = {"key"};
      q.values = {"value"};
      break;
    case p::Op::kGet:
    case p::Op::kDeleteKey:
      q.keys = {"key"};
      q.timeout_ms = 1000;
      break;
    case p::Op::kAdd:
      q.keys = {"counter"};
      q.number = 3;
      break;
    case p::Op::kCompareSet:
      q.keys = {"key"};
      q.values = {"old", "new"};
      break;
    case p::Op::kWait:
    case p::Op::kMultiGet:
    case p::Op::kCheck:
      q.keys = {"a", "b", "c"};
      q.timeout_ms = p::kNoTimeout;
      break;
    case p::Op::kMultiSet:
      q.keys = {"a", "b"};
      q.values = {"1", "2"};
      break;
    case p::Op::kBarrier:
      q.keys = {"barrier"};
      q.number = 4;
      q.timeout_ms = 500;
      break;
    case p::Op::kNumKeys:
    case p::Op::kListKeys:
      break;
  }
  return q;
}

bool Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::string stream;
  for (uint16_t k = 1; k <= static_cast<uint16_t>(p::Op::kAuth); ++k) {
    const p::Op op = static_cast<p::Op>(k);
    const std::string frame = p::EncodeRequest(Make(op));
    if (!Write(dir, std::string("request_") + p::OpName(op), frame)) return 1;
    if (k <= 3) stream += frame;
    p::Response r;
    r.number = 1;
    if (op == p::Op::kHello) r.values = {std::string(p::kAuthBytes, 's'), std::string(32, 'q')};
    if (op == p::Op::kGet || op == p::Op::kCompareSet) r.values = {"value"};
    if (op == p::Op::kMultiGet || op == p::Op::kListKeys) r.values = {"x", "y"};
    braid::Result<std::string> reply = p::EncodeResponse(op, 7, r);
    if (!reply.ok() || !Write(dir, std::string("reply_") + p::OpName(op), *reply)) return 1;
  }
  p::Response error;
  error.code = braid::Code::kTimeout;
  error.message = "timed out after 10 ms waiting for key 'k'";
  if (!Write(dir, "reply_error", p::EncodeResponse(p::Op::kGet, 7, error).value())) return 1;
  return Write(dir, "stream_hello_set_get", stream) ? 0 : 1;
}
