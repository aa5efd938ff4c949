// The round of single-copy reads (algorithms/peer_reads.h) and the read family on its own, over
// real shared-memory links between rank threads, each link wrapped so that the test decides
// which pairs may read each other's memory (a thread rank's shm link never does: the wrapper
// copies with memcpy and counts every read). Checked: every block lands where the call says
// whichever mix of pairs read and which fall back to a message; a rank reads exactly the owners
// its links may read, never the others; and ranks that disagree about a read fail naming it.
// Results are checked against closed forms computed here.
//
// Rank threads return strings; only the main thread calls Catch2 (Catch2 v2 is not thread-safe).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/peer_reads.h"
#include "algorithms/read_family.h"
#include "algorithms/tag_layout.h"
#include "tests/harness/mesh_rank_context.h"
#include "tests/harness/multi_rank.h"
#include "tests/harness/transport_mesh.h"

namespace braid::algorithms {
namespace {

using braid::testing::Failures;
using braid::testing::RunThreads;

constexpr int64_t kTimeoutMs = 20000;

// A link that reads the peer's memory (memcpy: the peers are threads of this process) where the
// test allows it, and says it cannot elsewhere; everything else goes to the real link.
class ReadingConnection : public transport::Connection {
 public:
  ReadingConnection(transport::Connection* inner, bool can_read, std::atomic<int>* reads)
      : inner_(inner), can_read_(can_read), reads_(reads) {}
  int peer() const override { return inner_->peer(); }
  transport::RequestPtr PostSend(const void* data, size_t bytes, uint64_t tag) override {
    return inner_->PostSend(data, bytes, tag);
  }
  transport::RequestPtr PostRecv(void* data, size_t bytes, uint64_t tag) override {
    return inner_->PostRecv(data, bytes, tag);
  }
  void Close(const Status& reason) override { inner_->Close(reason); }
  bool ReadsPeerMemory() const override { return can_read_; }
  Status ReadPeerMemory(uint64_t address, void* destination, size_t bytes) override {
    reads_->fetch_add(1);
    if (!can_read_) return Connection::ReadPeerMemory(address, destination, bytes);
    std::memcpy(destination, reinterpret_cast<const void*>(address), bytes);
    return Status::Ok();
  }

 private:
  transport::Connection* const inner_;
  const bool can_read_;
  std::atomic<int>* const reads_;
};

// Whether rank r's link may read rank p's memory: a mix, asymmetric on purpose.
bool CanRead(int r, int p) { return (r + 2 * p) % 3 != 0; }

struct Job {
  braid::testing::TransportMesh mesh;
  std::vector<std::vector<std::unique_ptr<ReadingConnection>>> links;
  std::vector<std::atomic<int>> reads;  // per rank: ReadPeerMemory calls

  explicit Job(int size)
      : mesh(braid::testing::MakeTransportMesh("shm", size, kTimeoutMs)),
        links(static_cast<size_t>(size)),
        reads(static_cast<size_t>(size)) {
    if (!mesh.error.empty()) return;
    for (int r = 0; r < size; ++r) {
      links[r].resize(static_cast<size_t>(size));
      for (int p = 0; p < size; ++p) {
        if (p != r) {
          links[r][p] = std::make_unique<ReadingConnection>(&mesh(r, p), CanRead(r, p), &reads[r]);
        }
      }
    }
  }
  // How many owners rank r's links may read among `owners`.
  int Readable(int r, const std::vector<int>& owners) const {
    int count = 0;
    for (int p : owners) count += CanRead(r, p) ? 1 : 0;
    return count;
  }
};

// Rank `rank`'s context over the wrapped links, in collective `sequence`.
struct RankContext : braid::testing::MeshRankContext {
  RankContext(Job& job, int rank, uint64_t sequence, int64_t timeout_ms)
      : MeshRankContext(job.mesh, rank, timeout_ms) {
    connect = [&job, rank](int peer) -> Result<transport::Connection*> {
      return static_cast<transport::Connection*>(job.links[rank][peer].get());
    };
    ctx.sequence = OperationSequence(TagSpace::kCollective, sequence);
  }
};

// Byte i of rank r's contribution for destination d (d = -1 where it goes to everyone).
uint8_t Byte(int r, int d, size_t i) { return static_cast<uint8_t>(31 * r + 7 * (d + 1) + i); }

std::string Wrong(const char* what, size_t i, int got, int want) {
  return std::string(what) + ": byte " + std::to_string(i) + " is " + std::to_string(got) +
         ", expected " + std::to_string(want);
}

}  // namespace

TEST_CASE("read family over links of which some may read: every block lands, reads go only "
          "where allowed",
          "[peer_reads]") {
  const int size = GENERATE(2, 3, 4, 5);
  const bool in_place = GENERATE(false, true);
  CAPTURE(size, in_place);
  Job job(size);
  REQUIRE(job.mesh.error.empty());
  const size_t block = 4099;  // odd
  const int root = size - 1;
  auto results = RunThreads(size, [&](int rank, int n) -> std::string {
    std::vector<int> others;
    for (int p = 0; p < n; ++p) {
      if (p != rank) others.push_back(p);
    }
    const size_t whole = block * static_cast<size_t>(n);
    // All-gather.
    {
      RankContext rc(job, rank, 1, kTimeoutMs);
      std::vector<uint8_t> out(whole, 0xEE), own(block);
      for (size_t i = 0; i < block; ++i) own[i] = Byte(rank, -1, i);
      uint8_t* send = own.data();
      if (in_place) {
        std::memcpy(out.data() + rank * block, own.data(), block);
        send = out.data() + rank * block;
      }
      CollectiveArgs args{Collective::kAllGather, send, out.data(), block, DataType::kUint8};
      const int before = job.reads[rank].load();
      Status status = ReadAllGather(rc.ctx, args);
      if (!status.ok()) return "allgather: " + status.ToString();
      for (size_t i = 0; i < whole; ++i) {
        const int want = Byte(static_cast<int>(i / block), -1, i % block);
        if (out[i] != want) return Wrong("allgather", i, out[i], want);
      }
      const int read = job.reads[rank].load() - before;
      if (read != job.Readable(rank, others)) {
        return "allgather: " + std::to_string(read) + " reads, expected " +
               std::to_string(job.Readable(rank, others));
      }
    }
    // All-to-all.
    {
      RankContext rc(job, rank, 2, kTimeoutMs);
      std::vector<uint8_t> send(whole), out(whole, 0xEE);
      for (size_t i = 0; i < whole; ++i) send[i] = Byte(rank, static_cast<int>(i / block), i % block);
      if (in_place) out = send;
      CollectiveArgs args{Collective::kAllToAll, in_place ? out.data() : send.data(), out.data(),
                          block, DataType::kUint8};
      Status status = ReadAllToAll(rc.ctx, args);
      if (!status.ok()) return "alltoall: " + status.ToString();
      for (size_t i = 0; i < whole; ++i) {
        const int want = Byte(static_cast<int>(i / block), rank, i % block);
        if (out[i] != want) return Wrong("alltoall", i, out[i], want);
      }
    }
    // Broadcast from the last rank.
    {
      RankContext rc(job, rank, 3, kTimeoutMs);
      std::vector<uint8_t> buffer(block, 0xEE), source(block);
      for (size_t i = 0; i < block; ++i) source[i] = Byte(root, -1, i);
      if (rank == root) buffer = source;
      CollectiveArgs args{Collective::kBroadcast,
                          rank == root && !in_place ? source.data() : buffer.data(),
                          buffer.data(), block, DataType::kUint8};
      args.root = root;
      const int before = job.reads[rank].load();
      Status status = ReadBroadcast(rc.ctx, args);
      if (!status.ok()) return "broadcast: " + status.ToString();
      if (buffer != source) return "broadcast: the buffer differs from the root's";
      const int read = job.reads[rank].load() - before;
      const int want = rank == root ? 0 : job.Readable(rank, {root});
      if (read != want) {
        return "broadcast: " + std::to_string(read) + " reads, expected " + std::to_string(want);
      }
    }
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("peer reads: a read beyond the owner's offer fails naming both sizes", "[peer_reads]") {
  Job job(2);
  REQUIRE(job.mesh.error.empty());
  auto results = RunThreads(2, [&](int rank, int) -> std::string {
    // Rank 0 offers 100 bytes; rank 1 wants 200 of them. Rank 1 fails at once; rank 0, whose
    // reader never answers, at its short deadline.
    RankContext rc(job, rank, 5, rank == 0 ? 1000 : kTimeoutMs);
    std::vector<uint8_t> buffer(200, 0x11);
    CollectiveArgs args{Collective::kAllGather, buffer.data(), buffer.data(), 100,
                        DataType::kUint8};
    Status status =
        rank == 0 ? RunPeerReads(rc.ctx, args, "read", buffer.data(), 100, {{1, 0, 100}}, {})
                  : RunPeerReads(rc.ctx, args, "read", nullptr, 0, {},
                                 {{0, 0, buffer.data(), 200}});
    if (rank == 1) {
      if (status.code() != Code::kInternalError) return "rank 1: " + status.ToString();
      if (status.message().find("offered 100 bytes and this rank needs 200") == std::string::npos ||
          status.message().find("rank 0") == std::string::npos) {
        return "rank 1's error does not name the sizes and the owner: " + status.message();
      }
      return "";
    }
    return status.code() == Code::kTimeout ? "" : "rank 0: " + status.ToString();
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

}  // namespace braid::algorithms
