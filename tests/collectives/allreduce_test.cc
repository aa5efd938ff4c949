// Allreduce against the serial reference: world sizes 1-8 (threads and processes), counts 0, 1, 7,
// 1023 and 2^20+3, every datatype and op, in place and out of place, with the default chunk size
// and with a tiny one that forces many pipelined slices and empty chunks.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/collectives/reference.h"
#include "tests/harness/multi_rank.h"

namespace braid::testing {
namespace {

const size_t kCounts[] = {0, 1, 7, 1023, (size_t{1} << 20) + 3};

std::string Describe(braidDataType_t type, braidRedOp_t op, size_t count, bool in_place) {
  return std::string("allreduce ") + TypeName(type) + " " + OpName(op) + " count " +
         std::to_string(count) + (in_place ? " in place" : " out of place");
}

// Runs the whole sweep on one rank; returns "" or the first failure.
std::string SweepAllReduce(int rank, int size, const braidUniqueId& id, int chunk_bytes,
                           bool large_counts) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.chunkBytes = chunk_bytes;
  config.timeoutMs = 120000;
  braidComm_t comm = nullptr;
  if (braidCommInitRankConfig(&comm, size, id, rank, &config) != braidSuccess) {
    return std::string("init failed: ") + braidGetLastError(nullptr);
  }
  std::string failure;
  for (size_t count : kCounts) {
    if (!large_counts && count > 4096) continue;
    for (int t = 0; t < braidNumTypes && failure.empty(); ++t) {
      for (int o = 0; o < braidNumOps && failure.empty(); ++o) {
        for (bool in_place : {false, true}) {
          auto type = static_cast<braidDataType_t>(t);
          auto op = static_cast<braidRedOp_t>(o);
          std::vector<char> send = MakeInput(type, op, rank, count);
          std::vector<char> recv(send.size(), 0x5A);
          void* out = in_place ? send.data() : recv.data();
          braidResult_t rc = braidAllReduce(send.data(), out, count, type, op, comm, nullptr);
          if (rc != braidSuccess) {
            failure = Describe(type, op, count, in_place) + ": " + braidGetErrorString(rc) + ": " +
                      braidGetLastError(comm);
            break;
          }
          std::string wrong = CheckReduced(type, op, size, out, count);
          if (wrong.empty() && !in_place) {
            // Out of place must leave the input alone and write nothing past the end.
            std::vector<char> original = MakeInput(type, op, rank, count);
            if (send != original) wrong = "sendbuff was modified";
            if (static_cast<unsigned char>(recv.back()) != 0x5A) wrong = "wrote past recvbuff";
          }
          if (!wrong.empty()) {
            failure = Describe(type, op, count, in_place) + ": " + wrong;
            break;
          }
        }
      }
    }
  }
  braidCommDestroy(comm);
  return failure;
}

braidUniqueId NewId() {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  return id;
}

}  // namespace

TEST_CASE("allreduce matches the serial reference, ranks as threads", "[allreduce][threads]") {
  const int size = GENERATE(1, 2, 3, 4, 5, 8);
  const int chunk = GENERATE(512 * 1024, 4096);
  CAPTURE(size, chunk);
  braidUniqueId id = NewId();
  // The large count runs with the default chunk; the tiny chunk covers slicing on small counts.
  const bool large = chunk != 4096;
  auto results = RunThreads(size, [&](int rank, int n) {
    return SweepAllReduce(rank, n, id, chunk, large);
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("allreduce matches the serial reference, ranks as processes", "[allreduce][processes]") {
  const int size = GENERATE(1, 2, 3, 4, 5, 8);
  CAPTURE(size);
  braidUniqueId id = NewId();
  auto results = RunProcesses(
      size, [&](int rank, int n) { return SweepAllReduce(rank, n, id, 512 * 1024, true); },
      300000);
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

}  // namespace braid::testing
