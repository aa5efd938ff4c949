#include "rendezvous/unique_id.h"

#include <cstdint>
#include <cstring>
#include <fstream>

namespace braid::rendezvous {
namespace {

constexpr char kMagic[4] = {'B', 'R', 'D', 'U'};
constexpr uint16_t kVersion = 1;
constexpr size_t kTokenOffset = 8;
constexpr size_t kTokenBytes = 16;
constexpr size_t kHostOffset = kTokenOffset + kTokenBytes;
constexpr size_t kHostMax = kUniqueIdBytes - kHostOffset;  // includes the NUL

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string ToHex(const unsigned char* bytes, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

Status EncodeUniqueId(const UniqueIdFields& fields, char out[kUniqueIdBytes]) {
  if (fields.host.empty() || fields.host.size() >= kHostMax) {
    return Status::InvalidArgument("unique id host '" + fields.host + "' is empty or longer than " +
                                   std::to_string(kHostMax - 1) + " characters");
  }
  if (fields.port <= 0 || fields.port > 65535) {
    return Status::InvalidArgument("unique id port " + std::to_string(fields.port) +
                                   " is out of range");
  }
  if (fields.token.size() != 2 * kTokenBytes) {
    return Status::InvalidArgument("unique id token must be 32 hex characters");
  }
  std::memset(out, 0, kUniqueIdBytes);
  std::memcpy(out, kMagic, 4);
  out[4] = static_cast<char>(kVersion & 0xFF);
  out[5] = static_cast<char>(kVersion >> 8);
  out[6] = static_cast<char>(fields.port & 0xFF);
  out[7] = static_cast<char>(fields.port >> 8);
  for (size_t i = 0; i < kTokenBytes; ++i) {
    int hi = HexValue(fields.token[2 * i]), lo = HexValue(fields.token[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("unique id token is not hex");
    out[kTokenOffset + i] = static_cast<char>(hi * 16 + lo);
  }
  std::memcpy(out + kHostOffset, fields.host.data(), fields.host.size());
  return Status::Ok();
}

Result<UniqueIdFields> DecodeUniqueId(const char in[kUniqueIdBytes]) {
  if (std::memcmp(in, kMagic, 4) != 0) {
    return Status::InvalidArgument(
        "commId is not a braid unique id (bad magic): was it filled by braidGetUniqueId and "
        "copied whole to every rank?");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  uint16_t version = static_cast<uint16_t>(bytes[4] | (bytes[5] << 8));
  if (version != kVersion) {
    return Status::InvalidArgument("commId has unique id version " + std::to_string(version) +
                                   ", this build of braid reads version " +
                                   std::to_string(kVersion));
  }
  UniqueIdFields fields;
  fields.port = bytes[6] | (bytes[7] << 8);
  fields.token = ToHex(bytes + kTokenOffset, kTokenBytes);
  const char* host = in + kHostOffset;
  size_t host_len = strnlen(host, kHostMax);
  if (host_len == 0 || host_len == kHostMax) {
    return Status::InvalidArgument("commId holds no valid store host");
  }
  fields.host.assign(host, host_len);
  if (fields.port == 0) return Status::InvalidArgument("commId holds store port 0");
  return fields;
}

Result<std::string> RandomToken() {
  unsigned char bytes[kTokenBytes];
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return Status::SystemError("cannot read /dev/urandom for a unique id token");
  }
  return ToHex(bytes, kTokenBytes);
}

}  // namespace braid::rendezvous
