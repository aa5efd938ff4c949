// Helpers shared by the shm transport tests: meshes of ShmTransports whose ranks are threads of
// this process, and message patterns. Catch2 v2 is not thread-safe: rank threads only record what
// they saw; assertions run on the main thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/transport_mesh.h"
#include "transport/shm/shm_transport.h"
#include "transport/shm/wire.h"

namespace braid::transport::shm::testing {

constexpr int64_t kTestTimeoutMs = 20000;

inline TransportContext Context(int rank, int size, uint64_t comm_id) {
  TransportContext context;
  context.rank = rank;
  context.size = size;
  context.comm_id = comm_id;
  return context;
}

inline std::unique_ptr<ShmTransport> MakeTransport(int rank, int size, uint64_t comm_id,
                                                   const ShmOptions& options = ShmOptions()) {
  Result<std::unique_ptr<ShmTransport>> t =
      ShmTransport::Create(Context(rank, size, comm_id), options);
  if (!t.ok() || t.value() == nullptr) return nullptr;
  return std::move(t.value());
}

// A full mesh of `size` ranks: transports[r] and conns[r][p] (null for p == r).
struct Mesh {
  std::vector<std::unique_ptr<ShmTransport>> transports;
  std::vector<std::vector<std::unique_ptr<Connection>>> conns;
  std::string error;  // first failure, "" if all connected
};

// Connects every pair (tests/harness/transport_mesh.h: each rank in a thread of its own).
inline Mesh ConnectMesh(std::vector<std::unique_ptr<ShmTransport>> transports) {
  Mesh mesh;
  mesh.transports = std::move(transports);
  for (auto& t : mesh.transports) {
    if (t == nullptr) {
      mesh.error = "a transport could not be created";
      return mesh;
    }
  }
  mesh.error = ::braid::testing::ConnectEveryPair(mesh.transports, &mesh.conns, kTestTimeoutMs);
  return mesh;
}

inline Mesh MakeMesh(int size, uint64_t comm_id, const ShmOptions& options = ShmOptions()) {
  std::vector<std::unique_ptr<ShmTransport>> transports;
  for (int r = 0; r < size; ++r) transports.push_back(MakeTransport(r, size, comm_id, options));
  return ConnectMesh(std::move(transports));
}

// Pattern bytes: word-wise so that hundreds of MiB fill and check quickly, different per
// (source, destination, size) so that misrouted or reordered messages are caught.
inline uint64_t PatternWord(size_t word, int src, int dst, size_t bytes) {
  uint64_t x = word * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(src) * 0x100000001B3ull +
               static_cast<uint64_t>(dst) * 0xC2B2AE3D27D4EB4Full + bytes;
  return x ^ (x >> 29);
}

inline void FillPattern(void* data, size_t bytes, int src, int dst) {
  char* out = static_cast<char*>(data);
  size_t words = bytes / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = PatternWord(i, src, dst, bytes);
    std::memcpy(out + 8 * i, &w, 8);
  }
  uint64_t last = PatternWord(words, src, dst, bytes);
  std::memcpy(out + 8 * words, &last, bytes - 8 * words);
}

inline std::vector<uint8_t> Pattern(size_t bytes, int src, int dst) {
  std::vector<uint8_t> data(bytes);
  FillPattern(data.data(), bytes, src, dst);
  return data;
}

// "" if `data` holds the pattern, else where it differs first.
inline std::string CheckPattern(const void* data, size_t bytes, int src, int dst) {
  std::vector<uint8_t> want(std::min<size_t>(bytes, 1 << 20));
  const char* in = static_cast<const char*>(data);
  for (size_t base = 0; base < bytes; base += want.size()) {
    // Re-derive the expected block (words never straddle blocks: blocks are multiples of 8).
    size_t n = std::min(want.size(), bytes - base);
    for (size_t off = 0; off < n; off += 8) {
      size_t word = (base + off) / 8;
      uint64_t w = PatternWord(word, src, dst, bytes);
      std::memcpy(want.data() + off, &w, std::min<size_t>(8, n - off));
    }
    if (std::memcmp(want.data(), in + base, n) != 0) {
      size_t i = 0;
      while (want[i] == static_cast<uint8_t>(in[base + i])) ++i;
      return "message " + std::to_string(src) + "->" + std::to_string(dst) + " of " +
             std::to_string(bytes) + " bytes differs at byte " + std::to_string(base + i);
    }
  }
  return "";
}

inline std::string CheckPattern(const std::vector<uint8_t>& data, int src, int dst) {
  return CheckPattern(data.data(), data.size(), src, dst);
}

// A handshake frame of `step` from `sender` to `receiver` in communicator `comm_id`, as a peer of
// this build would send it (the tests play strangers and forgers with it).
inline HandshakeFrame Frame(handshake::Step step, uint64_t comm_id, int sender, int receiver) {
  HandshakeFrame f;
  f.envelope.magic = kProtocol.magic;
  f.envelope.step = static_cast<uint16_t>(step);
  f.envelope.comm_id = comm_id;
  f.envelope.sender_rank = sender;
  f.envelope.receiver_rank = receiver;
  return f;
}

}  // namespace braid::transport::shm::testing
