// The Connection contract (transport/connection.h, transport/transport.h), checked the same way
// over every transport the registry builds: ordering, message sizes from 0 bytes to 16 MiB, the
// whole 64-bit tag range and tag/size mismatches, Abort waking every waiter, Close, a peer that
// goes away, deadlines, progress while every rank waits on its receive first, Probe, and
// PostRecvInto's hand-over of landed pieces (in order, each byte once, nothing after the end).
//
// The transports come from transport::TransportFactories() (transport/registry.cc): a transport
// registered there with a factory is tested here without a line of test code. One whose factory
// returns null on this host (verbs without a device, cuda_ipc without a GPU) is reported and
// skipped, except those in kMustRunHere, which every CI host has. Each rank is a Transport of its
// own in this process; rank threads return strings, and only the main thread calls Catch2.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/multi_rank.h"
#include "tests/harness/transport_mesh.h"
#include "transport/registry.h"

namespace braid::transport {
namespace {

using braid::testing::Failures;
using braid::testing::RunThreads;

constexpr int64_t kTestTimeoutMs = 20000;

// Transports every CI host can run: for these, "not available here" fails the suite.
const char* const kMustRunHere[] = {"shm", "tcp"};

struct Subject {
  std::string name;
  TransportFactoryFn create;
};

// Every transport the registry builds, in its priority order.
std::vector<Subject> Subjects() {
  std::vector<Subject> subjects;
  for (const TransportFactory& factory : TransportFactories()) {
    if (factory.create != nullptr) subjects.push_back({factory.name, factory.create});
  }
  return subjects;
}

bool MustRunHere(const std::string& name) {
  for (const char* must : kMustRunHere) {
    if (name == must) return true;
  }
  return false;
}

using Mesh = braid::testing::TransportMesh;

std::vector<std::unique_ptr<Transport>> MakeTransports(const Subject& subject, int size,
                                                       std::string* error, bool* unavailable) {
  return braid::testing::MakeMeshTransports(subject.name, subject.create, size, error, unavailable);
}

Mesh MakeMesh(const Subject& subject, int size) {
  return braid::testing::MakeTransportMesh(subject.name, subject.create, size, kTestTimeoutMs);
}

// Picks the transport under test (a Catch2 generator: each test runs once per transport) and
// connects `size` ranks over it. Returns false, after saying why, when the transport cannot run
// on this host and need not; a transport that must run here and cannot fails the test.
#define CONFORMANCE_MESH(mesh, ranks)                                                     \
  const std::vector<Subject> subjects_ = Subjects();                                      \
  REQUIRE(!subjects_.empty());                                                            \
  const Subject& subject = subjects_[GENERATE_COPY(range(size_t{0}, subjects_.size()))]; \
  CAPTURE(subject.name);                                                                  \
  Mesh mesh = MakeMesh(subject, ranks);                                                   \
  if (mesh.unavailable) {                                                                 \
    CHECK_FALSE(MustRunHere(subject.name));                                               \
    WARN(subject.name << " is not available on this host: not tested");                  \
    return;                                                                               \
  }                                                                                       \
  REQUIRE(mesh.error.empty())

// Rank threads over `mesh`; a rank still running after the deadline gets the mesh aborted.
std::vector<std::string> OnRanks(Mesh& mesh, const braid::testing::RankBody& body) {
  return RunThreads(static_cast<int>(mesh.transports.size()), body, 3 * kTestTimeoutMs,
                    [&](const std::vector<int>&) { mesh.AbortAll("conformance test hung"); });
}

// Pattern bytes, different per (source, destination, size), so misrouted or reordered messages
// are caught; word-wise so 16 MiB fill and check quickly.
uint64_t PatternWord(size_t word, int src, int dst, size_t bytes) {
  uint64_t x = word * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(src) * 0x100000001B3ull +
               static_cast<uint64_t>(dst) * 0xC2B2AE3D27D4EB4Full + bytes;
  return x ^ (x >> 29);
}

std::vector<uint8_t> Pattern(size_t bytes, int src, int dst) {
  std::vector<uint8_t> data(bytes);
  for (size_t off = 0; off < bytes; off += 8) {
    const uint64_t w = PatternWord(off / 8, src, dst, bytes);
    std::memcpy(data.data() + off, &w, std::min<size_t>(8, bytes - off));
  }
  return data;
}

// "" if `data` holds Pattern(data.size(), src, dst), else where it differs first.
std::string CheckPattern(const std::vector<uint8_t>& data, int src, int dst) {
  const std::vector<uint8_t> want = Pattern(data.size(), src, dst);
  if (data == want) return "";
  size_t i = 0;
  while (data[i] == want[i]) ++i;
  return "message " + std::to_string(src) + "->" + std::to_string(dst) + " of " +
         std::to_string(data.size()) + " bytes differs at byte " + std::to_string(i);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A LandingSink that checks the contract of transport/connection.h as pieces come (each starts
// where the previous ended, none is empty or runs past the message, no two calls overlap, none
// comes after the test saw the receive complete) and keeps the bytes for the pattern check.
class RecordingSink : public LandingSink {
 public:
  explicit RecordingSink(size_t bytes) : bytes_(bytes), got_(bytes, 0xEE) {}

  void Land(size_t offset, const void* data, size_t length) override {
    if (in_call_.exchange(true)) Note("two calls at once");
    if (done_.load()) Note("a piece after the receive completed");
    if (length == 0) Note("an empty piece at " + std::to_string(offset));
    if (offset != next_) {
      Note("a piece at " + std::to_string(offset) + " where " + std::to_string(next_) +
           " was next");
    } else if (length > bytes_ - offset) {
      Note("a piece of " + std::to_string(length) + " at " + std::to_string(offset) +
           " runs past the " + std::to_string(bytes_) + "-byte message");
    } else {
      std::memcpy(got_.data() + offset, data, length);
      next_ += length;
      ++pieces_;
    }
    in_call_.store(false);
  }

  // Once the receive completed OK: "" if the sink saw the whole message (then in bytes()), else
  // what went wrong. Later calls count as errors.
  std::string Verdict() {
    done_.store(true);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.empty()) return error_;
    if (next_ != bytes_) {
      return "the sink saw " + std::to_string(next_) + " of " + std::to_string(bytes_) + " bytes";
    }
    return "";
  }
  // Once the receive failed: "" if nothing was handed over.
  std::string NothingHanded() {
    done_.store(true);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.empty()) return error_;
    return pieces_ == 0 ? "" : std::to_string(pieces_) + " pieces handed over";
  }
  const std::vector<uint8_t>& bytes() const { return got_; }
  size_t pieces() const { return pieces_; }

 private:
  void Note(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.empty()) error_ = what;
  }

  const size_t bytes_;
  std::vector<uint8_t> got_;
  size_t next_ = 0;
  size_t pieces_ = 0;
  std::atomic<bool> in_call_{false};
  std::atomic<bool> done_{false};
  std::mutex mutex_;  // guards error_
  std::string error_;
};

}  // namespace

TEST_CASE("conformance: messages of every size arrive intact between every pair",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 3);
  // Around the sizes where transports change how they move a message (inline records, ring
  // pieces, by-reference copies, socket buffers).
  const std::vector<size_t> sizes = {0,     1,         7,         63,        64,
                                     65,    4095,      4097,      65537,     (1 << 20) + 3,
                                     (16 << 20) + 3};
  auto results = OnRanks(mesh, [&](int r, int n) -> std::string {
    // Sends to everyone and receives from everyone, all posted before any wait.
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<std::pair<int, RequestPtr>> recvs;
    std::vector<RequestPtr> sends;
    out.reserve(n * sizes.size());
    in.reserve(n * sizes.size());
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      for (size_t k = 0; k < sizes.size(); ++k) {
        in.emplace_back(sizes[k], 0xEE);
        recvs.emplace_back(p, mesh(r, p).PostRecv(in.back().data(), sizes[k], k));
        out.push_back(Pattern(sizes[k], r, p));
        sends.push_back(mesh(r, p).PostSend(out.back().data(), sizes[k], k));
      }
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      Status st = recvs[i].second->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return "recv: " + st.ToString();
      std::string bad = CheckPattern(in[i], recvs[i].first, r);
      if (!bad.empty()) return bad;
    }
    for (auto& s : sends) {
      Status st = s->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return "send: " + st.ToString();
    }
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("conformance: messages keep their order, sent long before the receives are posted",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  constexpr int kCount = 2000;
  auto bytes_of = [](int i) {
    return static_cast<size_t>((i * 37) % 300 + (i % 100 == 0) * 200000);
  };
  std::vector<std::vector<uint8_t>> out(kCount);
  std::vector<RequestPtr> sends;
  for (int i = 0; i < kCount; ++i) {
    out[i] = Pattern(bytes_of(i), 0, i % 200);
    sends.push_back(mesh(0, 1).PostSend(out[i].data(), out[i].size(), i));
  }
  // Let the sender run into backpressure (full rings, socket buffers) before anything is received.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string error;
  std::vector<uint8_t> in;
  for (int i = 0; i < kCount && error.empty(); ++i) {
    in.assign(bytes_of(i), 0);
    Status st = mesh(1, 0).PostRecv(in.data(), in.size(), i)->Wait(Deadline::AfterMs(kTestTimeoutMs));
    error = st.ok() ? CheckPattern(in, 0, i % 200) : "recv " + std::to_string(i) + ": " + st.ToString();
  }
  CHECK(error == "");
  for (auto& s : sends) CHECK(s->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("conformance: receives posted first are matched in posting order", "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  constexpr int kCount = 200;
  auto bytes_of = [](int i) { return static_cast<size_t>((i * 7919) % 70000); };
  std::vector<std::vector<uint8_t>> in(kCount), out(kCount);
  std::vector<RequestPtr> recvs, sends;
  for (int i = 0; i < kCount; ++i) {
    in[i].assign(bytes_of(i), 0);
    recvs.push_back(mesh(1, 0).PostRecv(in[i].data(), in[i].size(), 1000 + i));
  }
  for (int i = 0; i < kCount; ++i) {
    out[i] = Pattern(bytes_of(i), 0, 1);
    sends.push_back(mesh(0, 1).PostSend(out[i].data(), out[i].size(), 1000 + i));
  }
  for (int i = 0; i < kCount; ++i) {
    CAPTURE(i);
    REQUIRE(recvs[i]->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
    CHECK(CheckPattern(in[i], 0, 1) == "");
  }
  for (auto& s : sends) CHECK(s->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("conformance: every 64-bit tag travels, both directions", "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  const uint64_t tags[] = {0,
                           1,
                           0xFFFFFFFFull,
                           (uint64_t{1} << 32) + 5,
                           (uint64_t{1} << 39) | 77,
                           uint64_t{1} << 63,
                           (uint64_t{1} << 63) | 12345,
                           ~uint64_t{0}};
  for (uint64_t tag : tags) {
    for (int from = 0; from < 2; ++from) {
      CAPTURE(tag, from);
      const int to = 1 - from;
      std::vector<uint8_t> data = Pattern(100, from, to), buf(100);
      RequestPtr send = mesh(from, to).PostSend(data.data(), data.size(), tag);
      RequestPtr recv = mesh(to, from).PostRecv(buf.data(), buf.size(), tag);
      REQUIRE(recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
      CHECK(CheckPattern(buf, from, to) == "");
      CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
    }
  }
}

TEST_CASE("conformance: a tag or size mismatch fails the receive, naming both and the peer",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  Connection& sender = mesh(0, 1);
  Connection& receiver = mesh(1, 0);
  // Small messages travel whole; large ones in pieces or by reference.
  const size_t bytes = GENERATE(size_t{1000}, size_t{100000});
  CAPTURE(bytes);
  std::vector<uint8_t> data = Pattern(bytes, 0, 1), buf(bytes);
  SECTION("tag mismatch") {
    RequestPtr send = sender.PostSend(data.data(), data.size(), 4242);
    RequestPtr recv = receiver.PostRecv(buf.data(), buf.size(), 4243);
    Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
    CHECK(st.code() == Code::kInternalError);
    CHECK(Contains(st.message(), "4242"));
    CHECK(Contains(st.message(), "4243"));
    CHECK(Contains(st.message(), "rank 0"));
    CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  }
  SECTION("size mismatch") {
    RequestPtr send = sender.PostSend(data.data(), data.size(), 5);
    RequestPtr recv = receiver.PostRecv(buf.data(), bytes - 1, 5);
    Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
    CHECK(st.code() == Code::kInternalError);
    CHECK(Contains(st.message(), std::to_string(bytes - 1) + " bytes"));
    CHECK(Contains(st.message(), std::to_string(bytes) + " bytes"));
    CHECK(Contains(st.message(), "rank 0"));
    CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  }
  // Either way the refused message was dropped whole: the next one arrives intact.
  std::vector<uint8_t> next = Pattern(70000, 0, 1), next_buf(70000);
  RequestPtr send = sender.PostSend(next.data(), next.size(), 8);
  RequestPtr recv = receiver.PostRecv(next_buf.data(), next_buf.size(), 8);
  REQUIRE(recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(next_buf, 0, 1) == "");
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("conformance: PostRecvInto hands every byte over once, in order, at every size, "
          "matched in order with plain receives",
          "[conformance][landing]") {
  CONFORMANCE_MESH(mesh, 3);
  // The shm fast paths of the reducing algorithms rest on this: losing it is a slowdown that no
  // other test sees.
  if (subject.name == "shm") CHECK(mesh(0, 1).LandsInPlace());
  const std::vector<size_t> sizes = {0,     1,         7,         63,        64,
                                     65,    4095,      4097,      65537,     (1 << 20) + 3,
                                     (16 << 20) + 3};
  auto results = OnRanks(mesh, [&](int r, int n) -> std::string {
    struct Posted {
      int peer;
      size_t bytes;
      RequestPtr request;
      std::shared_ptr<RecordingSink> sink;  // null: a plain PostRecv into `buffer`
      std::vector<uint8_t> buffer;
    };
    std::vector<Posted> recvs;
    std::vector<std::vector<uint8_t>> out;
    std::vector<RequestPtr> sends;
    recvs.reserve(n * sizes.size());
    out.reserve(n * sizes.size());
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      for (size_t k = 0; k < sizes.size(); ++k) {
        // Every third receive is a plain one, so both kinds share one ordered stream; the tag
        // carries the index and a high bit, so a reordered message fails its match.
        const uint64_t tag = (uint64_t{1} << 63) | (k * 1000 + p);
        Posted posted{p, sizes[k], nullptr, nullptr, {}};
        if (k % 3 == 1) {
          posted.buffer.assign(sizes[k], 0xEE);
          posted.request = mesh(r, p).PostRecv(posted.buffer.data(), sizes[k], tag);
        } else {
          posted.sink = std::make_shared<RecordingSink>(sizes[k]);
          posted.request = mesh(r, p).PostRecvInto(sizes[k], tag, posted.sink);
        }
        recvs.push_back(std::move(posted));
        out.push_back(Pattern(sizes[k], r, p));
        sends.push_back(mesh(r, p).PostSend(out.back().data(), sizes[k],
                                            (uint64_t{1} << 63) | (k * 1000 + r)));
      }
    }
    for (Posted& posted : recvs) {
      const std::string what = "message of " + std::to_string(posted.bytes) + " bytes from rank " +
                               std::to_string(posted.peer) + ": ";
      Status st = posted.request->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return what + st.ToString();
      if (posted.sink != nullptr) {
        std::string verdict = posted.sink->Verdict();
        if (!verdict.empty()) return what + verdict;
        if (posted.bytes == 0 && posted.sink->pieces() != 0) return what + "pieces for 0 bytes";
        std::string bad = CheckPattern(posted.sink->bytes(), posted.peer, r);
        if (!bad.empty()) return what + bad;
      } else {
        std::string bad = CheckPattern(posted.buffer, posted.peer, r);
        if (!bad.empty()) return what + bad;
      }
    }
    for (auto& s : sends) {
      Status st = s->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return "send: " + st.ToString();
    }
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("conformance: PostRecvInto posted before the message completes for a waiter on "
          "another thread, and the connection lets go of the sink",
          "[conformance][landing]") {
  CONFORMANCE_MESH(mesh, 2);
  const size_t bytes = GENERATE(size_t{8}, size_t{100000}, (size_t{4} << 20) + 1);
  CAPTURE(bytes);
  std::vector<uint8_t> data = Pattern(bytes, 0, 1);
  auto sink = std::make_shared<RecordingSink>(bytes);
  RequestPtr recv = mesh(1, 0).PostRecvInto(bytes, 21, sink);
  Status waited = Status::Internal("not run");
  std::thread waiter([&] { waited = recv->Wait(Deadline::AfterMs(kTestTimeoutMs)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  RequestPtr send = mesh(0, 1).PostSend(data.data(), data.size(), 21);
  Status sent = send->Wait(Deadline::AfterMs(kTestTimeoutMs));
  waiter.join();
  CHECK(sent.ok());
  REQUIRE(waited.ok());
  CHECK(sink->Verdict() == "");
  CHECK(CheckPattern(sink->bytes(), 0, 1) == "");
  // Done: the connection holds the sink no longer (it may go away with the caller's state).
  CHECK(sink.use_count() == 1);
}

TEST_CASE("conformance: a PostRecvInto tag or size mismatch fails naming both, hands nothing "
          "over, and the next message arrives intact",
          "[conformance][landing]") {
  CONFORMANCE_MESH(mesh, 2);
  const size_t bytes = GENERATE(size_t{1000}, size_t{100000});
  const bool size_mismatch = GENERATE(false, true);
  CAPTURE(bytes, size_mismatch);
  std::vector<uint8_t> data = Pattern(bytes, 0, 1);
  RequestPtr send = mesh(0, 1).PostSend(data.data(), data.size(), 4242);
  const size_t want_bytes = size_mismatch ? bytes + 1 : bytes;
  const uint64_t want_tag = size_mismatch ? 4242 : 4243;
  auto refused_sink = std::make_shared<RecordingSink>(want_bytes);
  Status st = mesh(1, 0).PostRecvInto(want_bytes, want_tag, refused_sink)
                  ->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(st.code() == Code::kInternalError);
  CHECK(Contains(st.message(), "rank 0"));
  if (size_mismatch) {
    CHECK(Contains(st.message(), std::to_string(want_bytes) + " bytes"));
    CHECK(Contains(st.message(), std::to_string(bytes) + " bytes"));
  } else {
    CHECK(Contains(st.message(), "4242"));
    CHECK(Contains(st.message(), "4243"));
  }
  CHECK(refused_sink->NothingHanded() == "");
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  std::vector<uint8_t> next = Pattern(70000, 0, 1);
  RequestPtr send_next = mesh(0, 1).PostSend(next.data(), next.size(), 8);
  auto sink = std::make_shared<RecordingSink>(next.size());
  REQUIRE(mesh(1, 0).PostRecvInto(next.size(), 8, sink)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(sink->Verdict() == "");
  CHECK(CheckPattern(sink->bytes(), 0, 1) == "");
  CHECK(send_next->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("conformance: a pending PostRecvInto fails on Close or Abort, its sink no more called",
          "[conformance][landing]") {
  CONFORMANCE_MESH(mesh, 2);
  const bool abort = GENERATE(false, true);
  CAPTURE(abort);
  auto sink = std::make_shared<RecordingSink>(1 << 20);
  RequestPtr pending = mesh(0, 1).PostRecvInto(1 << 20, 1, sink);
  if (abort) {
    mesh.transports[0]->Abort(Status::Aborted("aborted by the test"));
  } else {
    mesh(0, 1).Close(Status::Aborted("closed by the test"));
  }
  Status st = pending->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(st.code() == Code::kAborted);
  CHECK(Contains(st.message(), abort ? "aborted by the test" : "closed by the test"));
  // The peer's message, sent now, goes nowhere: the link is gone on this side.
  std::vector<uint8_t> data = Pattern(1 << 20, 1, 0);
  RequestPtr send = mesh(1, 0).PostSend(data.data(), data.size(), 1);
  (void)send->Wait(Deadline::AfterMs(200));
  CHECK(sink->NothingHanded() == "");
  CHECK(sink.use_count() == 1);
  // Later receives fail at once, as PostRecv's do.
  RequestPtr later = mesh(0, 1).PostRecvInto(8, 2, std::make_shared<RecordingSink>(8));
  CHECK(later->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kAborted);
}

// Probes `connection` until it reports a message or fails, for at most kTestTimeoutMs.
Result<std::optional<Connection::Incoming>> ProbeUntilSome(Connection& connection) {
  const Deadline deadline = Deadline::AfterMs(kTestTimeoutMs);
  for (;;) {
    auto probed = connection.Probe();
    if (!probed.ok() || probed.value() || deadline.Expired()) return probed;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

TEST_CASE("conformance: Probe says nothing until a message arrives, then its tag and size, "
          "and leaves it for the receive",
          "[conformance][probe]") {
  CONFORMANCE_MESH(mesh, 2);
  Connection& sender = mesh(0, 1);
  Connection& receiver = mesh(1, 0);
  auto nothing = receiver.Probe();
  REQUIRE(nothing.ok());
  CHECK_FALSE(nothing.value().has_value());
  // One line, one record, ring pieces or by reference, socket-buffer sized, 0 bytes.
  const std::vector<size_t> sizes = {8, 1000, 100000, (4 << 20) + 3, 0};
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t bytes = sizes[k];
    const uint64_t tag = (uint64_t{3} << 62) | (1000 + k);
    CAPTURE(bytes);
    std::vector<uint8_t> data = Pattern(bytes, 0, 1), buf(bytes, 0xEE);
    RequestPtr send = sender.PostSend(data.data(), data.size(), tag);
    auto probed = ProbeUntilSome(receiver);
    REQUIRE(probed.ok());
    REQUIRE(probed.value().has_value());
    CHECK(probed.value()->tag == tag);
    CHECK(probed.value()->bytes == bytes);
    // Asking again changes nothing: the message is still next.
    auto again = receiver.Probe();
    REQUIRE(again.ok());
    REQUIRE(again.value().has_value());
    CHECK(again.value()->tag == tag);
    CHECK(again.value()->bytes == bytes);
    REQUIRE(receiver.PostRecv(buf.data(), bytes, tag)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
    CHECK(CheckPattern(buf, 0, 1) == "");
    CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
    auto after = receiver.Probe();
    REQUIRE(after.ok());
    CHECK_FALSE(after.value().has_value());
  }
}

TEST_CASE("conformance: Probe reports another tag as it is; the receive decides",
          "[conformance][probe]") {
  CONFORMANCE_MESH(mesh, 2);
  const size_t bytes = GENERATE(size_t{16}, size_t{200000});
  CAPTURE(bytes);
  std::vector<uint8_t> data = Pattern(bytes, 0, 1), buf(bytes);
  RequestPtr send = mesh(0, 1).PostSend(data.data(), bytes, 77);
  auto probed = ProbeUntilSome(mesh(1, 0));
  REQUIRE(probed.ok());
  REQUIRE(probed.value().has_value());
  CHECK(probed.value()->tag == 77);  // not what a receive for tag 78 expects, and not an error
  CHECK(probed.value()->bytes == bytes);
  // A receive for another size is refused as always and the message dropped whole; a probe
  // then sees the next message, not the rest of the refused one.
  Status refused = mesh(1, 0).PostRecv(buf.data(), bytes / 2, 77)->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(refused.code() == Code::kInternalError);
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  std::vector<uint8_t> next = Pattern(300, 0, 1), next_buf(300);
  RequestPtr send_next = mesh(0, 1).PostSend(next.data(), next.size(), 78);
  auto probed_next = ProbeUntilSome(mesh(1, 0));
  REQUIRE(probed_next.ok());
  REQUIRE(probed_next.value().has_value());
  CHECK(probed_next.value()->tag == 78);
  CHECK(probed_next.value()->bytes == 300);
  REQUIRE(mesh(1, 0).PostRecv(next_buf.data(), 300, 78)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(next_buf, 0, 1) == "");
  CHECK(send_next->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("conformance: Probe while a receive is pending is an error", "[conformance][probe]") {
  CONFORMANCE_MESH(mesh, 2);
  std::vector<uint8_t> buf(100);
  RequestPtr pending = mesh(1, 0).PostRecv(buf.data(), buf.size(), 1);
  auto probed = mesh(1, 0).Probe();
  CHECK(probed.status().code() == Code::kInternalError);
  std::vector<uint8_t> data = Pattern(100, 0, 1);
  RequestPtr send = mesh(0, 1).PostSend(data.data(), data.size(), 1);
  REQUIRE(pending->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(buf, 0, 1) == "");
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
}

TEST_CASE("conformance: Probe fails once the link is closed, aborted or the peer is gone, "
          "after reporting what the peer sent before",
          "[conformance][probe]") {
  CONFORMANCE_MESH(mesh, 2);
  const std::string how = GENERATE(as<std::string>(), "peer closed", "closed here", "aborted here");
  CAPTURE(how);
  std::vector<uint8_t> data = Pattern(500, 1, 0), buf(500);
  REQUIRE(mesh(1, 0).PostSend(data.data(), data.size(), 9)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  if (how == "peer closed") {
    mesh.conns[1][0].reset();
    // What it sent before it left is still reported, and received.
    auto probed = ProbeUntilSome(mesh(0, 1));
    REQUIRE(probed.ok());
    REQUIRE(probed.value().has_value());
    CHECK(probed.value()->tag == 9);
    CHECK(probed.value()->bytes == 500);
    REQUIRE(mesh(0, 1).PostRecv(buf.data(), 500, 9)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
    CHECK(CheckPattern(buf, 1, 0) == "");
    // Then the loss (shm hears of it from its control thread, so it may take a moment).
    auto lost = ProbeUntilSome(mesh(0, 1));
    CHECK(lost.status().code() == Code::kRemoteError);
    CHECK(Contains(lost.status().message(), "rank 1"));
  } else {
    if (how == "closed here") {
      mesh(0, 1).Close(Status::Aborted("closed by the test"));
    } else {
      mesh.transports[0]->Abort(Status::Aborted("aborted by the test"));
    }
    auto probed = mesh(0, 1).Probe();
    CHECK(probed.status().code() == Code::kAborted);
    CHECK(Contains(probed.status().message(), how == "closed here" ? "closed by the test"
                                                                   : "aborted by the test"));
  }
}

// ReadPeerMemory (the read algorithms' single copy): a link that says it can read copies exactly
// the bytes of the peer's memory asked for; one that cannot (these meshes are threads of one
// process, which shm does not read, and TCP never reads) refuses with kInvalidUsage naming the
// peer and writes nothing. Reads between processes: tests/transport/shm_process_test.
TEST_CASE("conformance: ReadPeerMemory copies what it is asked where the link can read, and is "
          "refused naming the peer where it cannot",
          "[conformance][peer_read]") {
  CONFORMANCE_MESH(mesh, 2);
  const std::vector<uint8_t> offered = Pattern(100003, 1, 0);
  std::vector<uint8_t> got(offered.size(), 0xEE);
  Connection& link = mesh(0, 1);
  const Status read =
      link.ReadPeerMemory(reinterpret_cast<uint64_t>(offered.data()), got.data(), got.size());
  if (link.ReadsPeerMemory()) {
    REQUIRE(read.ok());
    CHECK(CheckPattern(got, 1, 0) == "");
  } else {
    CHECK(read.code() == Code::kInvalidUsage);
    CHECK_THAT(read.message(), Catch::Contains("rank 1"));
    CHECK(got == std::vector<uint8_t>(offered.size(), 0xEE));
  }
}

TEST_CASE("conformance: Abort wakes every waiter of every connection at once, and stays",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 3);
  std::vector<uint8_t> a(10), b(10), c(1 << 20), big(64 << 20);
  std::vector<RequestPtr> requests = {
      mesh(0, 1).PostRecv(a.data(), a.size(), 1),
      mesh(0, 1).PostRecv(b.data(), b.size(), 2),
      mesh(0, 2).PostRecv(c.data(), c.size(), 3),
      // Never received by rank 2: stalls on ring or socket space, or waits to be read.
      mesh(0, 2).PostSend(big.data(), big.size(), 4),
  };
  std::vector<Status> results(requests.size());
  std::vector<std::chrono::steady_clock::time_point> woke(requests.size());
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < requests.size(); ++i) {
    waiters.emplace_back([&, i] {
      results[i] = requests[i]->Wait(Deadline::AfterMs(10 * 60 * 1000));
      woke[i] = std::chrono::steady_clock::now();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let them fall asleep
  const auto aborted_at = std::chrono::steady_clock::now();
  std::thread aborter([&] { mesh.transports[0]->Abort(Status::Aborted("stop everything")); });
  aborter.join();
  for (auto& t : waiters) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    CHECK(results[i].code() == Code::kAborted);
    CHECK(Contains(results[i].message(), "stop everything"));
    CHECK(woke[i] - aborted_at < std::chrono::milliseconds(1000));
  }
  // Later requests fail at once, and so does Connect.
  RequestPtr late = mesh(0, 1).PostSend(a.data(), a.size(), 5);
  CHECK(late->Test());
  CHECK(late->status().code() == Code::kAborted);
  RequestPtr late_recv = mesh(0, 1).PostRecv(a.data(), a.size(), 5);
  CHECK(late_recv->Test());
  CHECK(late_recv->status().code() == Code::kAborted);
  auto again = mesh.transports[0]->Connect(1, mesh.transports[1]->LocalAddress(),
                                           Deadline::AfterMs(kTestTimeoutMs));
  CHECK(again.status().code() == Code::kAborted);
}

TEST_CASE("conformance: Close fails the closer's pending requests and is idempotent",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  std::vector<uint8_t> buf(1 << 20);
  RequestPtr pending = mesh(0, 1).PostRecv(buf.data(), buf.size(), 1);
  mesh(0, 1).Close(Status::Aborted("closed by the test"));
  mesh(0, 1).Close(Status::Aborted("closed twice"));
  REQUIRE(pending->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kAborted);
  CHECK(Contains(pending->status().message(), "closed by the test"));
  RequestPtr later = mesh(0, 1).PostSend(buf.data(), 10, 2);
  CHECK(later->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() != Code::kOk);
  // The peer hears of it: its receive fails naming rank 0 instead of waiting out its deadline.
  Status peer = mesh(1, 0).PostRecv(buf.data(), 10, 3)->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(peer.code() == Code::kRemoteError);
  CHECK(Contains(peer.message(), "rank 0"));
}

TEST_CASE("conformance: a peer that goes away fails pending and later requests, naming it",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  const bool connection_first = GENERATE(true, false);
  CAPTURE(connection_first);
  std::vector<uint8_t> buf(1 << 20), junk(1 << 20);
  RequestPtr recv = mesh(0, 1).PostRecv(buf.data(), buf.size(), 3);
  RequestPtr peer_recv = mesh(1, 0).PostRecv(junk.data(), junk.size(), 4);
  if (connection_first) {
    mesh.conns[1][0].reset();
    mesh.transports[1].reset();
  } else {
    mesh.transports[1].reset();  // its connections fail, but outlive it safely
    RequestPtr after = mesh(1, 0).PostSend(junk.data(), junk.size(), 5);
    CHECK(after->Test());
    CHECK(after->status().code() != Code::kOk);
    mesh.conns[1][0].reset();
  }
  CHECK(peer_recv->Test());
  CHECK(peer_recv->status().code() != Code::kOk);
  Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(st.code() == Code::kRemoteError);
  CHECK(Contains(st.message(), "rank 1"));
  RequestPtr later = mesh(0, 1).PostSend(buf.data(), 10, 9);
  CHECK(later->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kRemoteError);
  RequestPtr later_recv = mesh(0, 1).PostRecv(buf.data(), 10, 9);
  CHECK(later_recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).code() == Code::kRemoteError);
}

TEST_CASE("conformance: messages sent before the peer closed are still delivered",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  std::vector<uint8_t> a = Pattern(100, 1, 0), b = Pattern(3000, 1, 0);
  REQUIRE(mesh(1, 0).PostSend(a.data(), a.size(), 1)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  REQUIRE(mesh(1, 0).PostSend(b.data(), b.size(), 2)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  mesh.conns[1][0].reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let rank 0 see the end
  std::vector<uint8_t> buf_a(100), buf_b(3000), buf_c(10);
  CHECK(mesh(0, 1).PostRecv(buf_a.data(), 100, 1)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(mesh(0, 1).PostRecv(buf_b.data(), 3000, 2)->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(buf_a, 1, 0) == "");
  CHECK(CheckPattern(buf_b, 1, 0) == "");
  Status st = mesh(0, 1).PostRecv(buf_c.data(), 10, 3)->Wait(Deadline::AfterMs(kTestTimeoutMs));
  CHECK(st.code() == Code::kRemoteError);
  CHECK(Contains(st.message(), "rank 1"));
}

TEST_CASE("conformance: a Wait past its deadline times out and leaves the request pending",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  std::vector<uint8_t> data = Pattern(50000, 0, 1), buf(50000);
  RequestPtr recv = mesh(1, 0).PostRecv(buf.data(), buf.size(), 4);
  const auto start = std::chrono::steady_clock::now();
  Status st = recv->Wait(Deadline::AfterMs(30));
  CHECK(st.code() == Code::kTimeout);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1000));
  CHECK_FALSE(recv->Test());
  RequestPtr send = mesh(0, 1).PostSend(data.data(), data.size(), 4);
  CHECK(recv->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(send->Wait(Deadline::AfterMs(kTestTimeoutMs)).ok());
  CHECK(CheckPattern(buf, 0, 1) == "");
}

TEST_CASE("conformance: a waiter on another thread wakes when its request completes",
          "[conformance]") {
  CONFORMANCE_MESH(mesh, 2);
  const size_t bytes = GENERATE(size_t{8}, size_t{1} << 20);
  CAPTURE(bytes);
  std::vector<uint8_t> data = Pattern(bytes, 0, 1), buf(bytes);
  RequestPtr recv = mesh(1, 0).PostRecv(buf.data(), buf.size(), 1);
  Status waited = Status::Internal("not run");
  std::thread waiter([&] { waited = recv->Wait(Deadline::AfterMs(kTestTimeoutMs)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  RequestPtr send = mesh(0, 1).PostSend(data.data(), data.size(), 1);
  Status sent = send->Wait(Deadline::AfterMs(kTestTimeoutMs));
  waiter.join();
  CHECK(sent.ok());
  CHECK(waited.ok());
  CHECK(CheckPattern(buf, 0, 1) == "");
}

TEST_CASE("conformance: a ring of large messages completes while every rank waits on its "
          "receive first",
          "[conformance]") {
  // Each rank's send to the right cannot finish before the right receives, while that rank waits
  // on its own receive: only a transport whose waiters keep every send moving completes this.
  CONFORMANCE_MESH(mesh, 3);
  const size_t bytes = (8 << 20) + 5;
  auto results = OnRanks(mesh, [&](int r, int n) -> std::string {
    const int left = (r + n - 1) % n, right = (r + 1) % n;
    for (int round = 0; round < 3; ++round) {
      std::vector<uint8_t> out = Pattern(bytes, r, right), in(bytes);
      RequestPtr recv = mesh(r, left).PostRecv(in.data(), in.size(), round);
      RequestPtr send = mesh(r, right).PostSend(out.data(), out.size(), round);
      Status st = recv->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return "recv: " + st.ToString();
      std::string bad = CheckPattern(in, left, r);
      if (!bad.empty()) return bad;
      st = send->Wait(Deadline::AfterMs(kTestTimeoutMs));
      if (!st.ok()) return "send: " + st.ToString();
    }
    return "";
  });
  INFO(Failures(results));
  CHECK(Failures(results).empty());
}

TEST_CASE("conformance: Connect to a peer that never shows times out naming it",
          "[conformance]") {
  const std::vector<Subject> subjects = Subjects();
  REQUIRE(!subjects.empty());
  const Subject& subject = subjects[GENERATE_COPY(range(size_t{0}, subjects.size()))];
  CAPTURE(subject.name);
  std::string error;
  bool unavailable = false;
  auto transports = MakeTransports(subject, 2, &error, &unavailable);
  if (unavailable) {
    CHECK_FALSE(MustRunHere(subject.name));
    WARN(subject.name << " is not available on this host: not tested");
    return;
  }
  REQUIRE(error.empty());
  const auto start = std::chrono::steady_clock::now();
  auto c = transports[1]->Connect(0, transports[0]->LocalAddress(), Deadline::AfterMs(300));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kTimeout);
  CHECK(Contains(c.status().message(), "rank 0"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(5000));
}

TEST_CASE("conformance: every transport CI must run is registered and built", "[conformance]") {
  const std::vector<Subject> subjects = Subjects();
  for (const char* must : kMustRunHere) {
    CAPTURE(must);
    bool found = false;
    for (const Subject& s : subjects) found = found || s.name == must;
    CHECK(found);
  }
}

}  // namespace braid::transport
