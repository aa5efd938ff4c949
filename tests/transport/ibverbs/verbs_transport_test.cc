// The verbs transport over the software model of the verbs calls (install_verbs_model.cc is
// linked in): the failures it must turn into clear errors without hanging -- a full credit
// window, a write outside the peer's ring or without remote write access, a peer process that
// vanishes -- plus its settings and its registration cache. The Connection contract itself is
// checked by tests/transport/connection_conformance_test (the verbs_model variant).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/harness/transport_mesh.h"
#include "tests/transport/ibverbs/read_all.h"
#include "tests/transport/ibverbs/verbs_model.h"
#include "transport/ibverbs/verbs_connection.h"
#include "transport/ibverbs/verbs_transport.h"

namespace braid::transport::ibverbs {
namespace {

using braid::testing::MakeTransportMesh;
using braid::testing::ReadAll;
using braid::testing::TransportMesh;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Tests every request until all are done or `ms` pass (requests of different transports need
// each transport driven, which Test() does).
bool TestAll(const std::vector<RequestPtr>& requests, int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    for (const RequestPtr& request : requests) all = request->Test() && all;
    if (all) return true;
  }
  return false;
}

std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + seed);
  return data;
}

// The transport's own factory, as transport/registry.cc registers it.
Result<std::unique_ptr<Transport>> CreateVerbs(const TransportContext& context) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<VerbsTransport> transport,
                         VerbsTransport::Create(context));
  return std::unique_ptr<Transport>(std::move(transport));
}

TransportMesh VerbsMesh(int size) {
  return MakeTransportMesh("ibverbs", &CreateVerbs, size, 20000);
}

TransportContext Context(int rank, uint64_t comm_id) {
  TransportContext context;
  context.rank = rank;
  context.size = 2;
  context.comm_id = comm_id;
  context.secret = "verbs-test-secret";
  context.config.socket_ifname = "lo";
  return context;
}

TEST_CASE("verbs: a full credit window times out naming it, then recovers", "[verbs]") {
  TransportMesh mesh = VerbsMesh(2);
  REQUIRE(mesh.error.empty());
  REQUIRE_FALSE(mesh.unavailable);
  const uint64_t naks = braid::testing::verbs_model::RnrNaks();
  // More chunks than the peer's ring has slots, and the peer posts no receive.
  const size_t bytes = size_t{kSlots + 8} * kSlotBytes;
  std::vector<uint8_t> out = Pattern(bytes, 3), in(bytes, 0);
  RequestPtr send = mesh(0, 1).PostSend(out.data(), bytes, 77);
  auto start = std::chrono::steady_clock::now();
  Status stalled = send->Wait(Deadline::AfterMs(300));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  CHECK(stalled.code() == Code::kTimeout);
  CHECK(Contains(stalled.message(), "credit window is exhausted"));
  CHECK(Contains(stalled.message(), "rank 1"));
  // Once the peer receives, the credits come back and the message completes intact.
  RequestPtr recv = mesh(1, 0).PostRecv(in.data(), bytes, 77);
  REQUIRE(TestAll({send, recv}, 20000));
  CHECK(send->status().ok());
  CHECK(recv->status().ok());
  CHECK(in == out);
  // Flow control kept a receive posted for every write.
  CHECK(braid::testing::verbs_model::RnrNaks() == naks);
}

TEST_CASE("verbs: repeated sends from one buffer register it once", "[verbs]") {
  TransportMesh mesh = VerbsMesh(2);
  REQUIRE(mesh.error.empty());
  REQUIRE_FALSE(mesh.unavailable);
  auto* verbs = dynamic_cast<VerbsTransport*>(mesh.transports[0].get());
  REQUIRE(verbs != nullptr);
  const uint64_t misses = verbs->registration_cache().misses();
  const uint64_t hits = verbs->registration_cache().hits();
  std::vector<uint8_t> out = Pattern(300000, 9), in(300000);
  for (int i = 0; i < 5; ++i) {
    // Sends from inside the buffer too: a range inside a registered one is a hit.
    RequestPtr send = mesh(0, 1).PostSend(out.data() + i, out.size() - i, i);
    RequestPtr recv = mesh(1, 0).PostRecv(in.data(), out.size() - i, i);
    REQUIRE(TestAll({send, recv}, 20000));
    REQUIRE(send->status().ok());
    REQUIRE(recv->status().ok());
    CHECK(std::memcmp(in.data(), out.data() + i, out.size() - i) == 0);
  }
  CHECK(verbs->registration_cache().misses() == misses + 1);
  CHECK(verbs->registration_cache().hits() == hits + 4);
}

// Two links of the transport's data path wired by hand, so the peer's set-up record can be
// tampered with: what a write outside the ring, or to memory without remote write access, does.
struct HandWiredPair {
  IbConfig config;
  std::shared_ptr<VerbsDevice> devices[2];
  std::shared_ptr<RegistrationCache> caches[2];
  std::shared_ptr<VerbsLink> links[2];
  std::shared_ptr<VerbsDriver> driver = std::make_shared<VerbsDriver>(2);

  HandWiredPair() {
    const VerbsApi& api = braid::testing::verbs_model::ModelVerbsApi();
    for (int r = 0; r < 2; ++r) {
      std::string why;
      Result<std::unique_ptr<VerbsDevice>> device = VerbsDevice::Open(api, config, &why);
      REQUIRE(device.ok());
      REQUIRE(device.value() != nullptr);
      devices[r] = std::move(device.value());
      caches[r] = std::make_shared<RegistrationCache>(api, devices[r]->pd(), true);
      Result<std::shared_ptr<VerbsLink>> link =
          VerbsLink::Create(devices[r], caches[r], config, r, 1 - r);
      REQUIRE(link.ok());
      links[r] = link.value();
      driver->Add(links[r]);
    }
  }
  ~HandWiredPair() {
    for (auto& link : links) link.reset();  // before the devices' protection domains
  }
};

TEST_CASE("verbs: a write outside the peer's ring fails both sides with braidRemoteError",
          "[verbs]") {
  HandWiredPair pair;
  SetupInfo tampered = pair.links[1]->local_info();
  tampered.ring_addr += uint64_t{kSlots} * kSlotBytes;  // just past the ring
  REQUIRE(pair.links[0]->Connect(tampered).ok());
  REQUIRE(pair.links[1]->Connect(pair.links[0]->local_info()).ok());
  std::vector<uint8_t> out = Pattern(1000, 1), in(1000);
  RequestPtr recv = pair.links[1]->PostRecv(in.data(), in.size(), 5, nullptr, pair.driver);
  RequestPtr send = pair.links[0]->PostSend(out.data(), out.size(), 5, pair.driver);
  REQUIRE(TestAll({send, recv}, 10000));
  INFO(send->status().ToString());
  CHECK(send->status().code() == Code::kRemoteError);
  CHECK(Contains(send->status().message(), "rank 1"));
  CHECK(Contains(send->status().message(), "verbs status " + std::to_string(IBV_WC_REM_ACCESS_ERR) +
                                               " (remote access error)"));
  // The responder's QP went to the error state: its receive is flushed, not left waiting.
  INFO(recv->status().ToString());
  CHECK(recv->status().code() == Code::kRemoteError);
  CHECK(Contains(recv->status().message(), "a receive from rank 0 failed"));
}

TEST_CASE("verbs: a write to memory without remote write access fails with braidRemoteError",
          "[verbs]") {
  HandWiredPair pair;
  const VerbsApi& api = braid::testing::verbs_model::ModelVerbsApi();
  SetupInfo tampered = pair.links[1]->local_info();
  // The same ring, registered a second time for local access only.
  ibv_mr* local_only =
      api.reg_mr(pair.devices[1]->pd(), reinterpret_cast<void*>(tampered.ring_addr),
                 size_t{kSlots} * kSlotBytes, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(local_only != nullptr);
  tampered.ring_rkey = local_only->rkey;
  REQUIRE(pair.links[0]->Connect(tampered).ok());
  REQUIRE(pair.links[1]->Connect(pair.links[0]->local_info()).ok());
  std::vector<uint8_t> out = Pattern(64, 2);
  RequestPtr send = pair.links[0]->PostSend(out.data(), out.size(), 5, pair.driver);
  REQUIRE(TestAll({send}, 10000));
  INFO(send->status().ToString());
  CHECK(send->status().code() == Code::kRemoteError);
  CHECK(Contains(send->status().message(), "rank 1"));
  CHECK(Contains(send->status().message(), "remote access error"));
  // Everything after the failure fails at once with the same error.
  RequestPtr later = pair.links[0]->PostSend(out.data(), out.size(), 6, pair.driver);
  CHECK(later->IsDone());
  CHECK(later->status().message() == send->status().message());
  pair.links[1].reset();
  api.dereg_mr(local_only);
}

TEST_CASE("verbs: a peer process that vanishes fails a pending receive naming it, no hang",
          "[verbs]") {
  const uint64_t comm_id = (static_cast<uint64_t>(getpid()) << 32) | 0x7e;
  int to_child[2], to_parent[2];
  REQUIRE(pipe(to_child) == 0);
  REQUIRE(pipe(to_parent) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Rank 1: link with rank 0, tell it so, then die without closing anything.
    Result<std::unique_ptr<VerbsTransport>> transport = VerbsTransport::Create(Context(1, comm_id));
    if (!transport.ok() || transport.value() == nullptr) _exit(2);
    std::string mine = transport.value()->LocalAddress();
    mine.resize(128);
    char theirs[128] = {};
    if (write(to_parent[1], mine.data(), 128) != 128 || !ReadAll(to_child[0], theirs, 128)) {
      _exit(3);
    }
    Result<std::unique_ptr<Connection>> connection =
        transport.value()->Connect(0, theirs, Deadline::AfterMs(20000));
    if (!connection.ok()) _exit(4);
    // One message over the link, so it is up before this process dies.
    uint64_t hello = 0x600d;
    if (!connection.value()->PostSend(&hello, 8, 0)->Wait(Deadline::AfterMs(20000)).ok()) _exit(7);
    char linked = 'l';
    if (write(to_parent[1], &linked, 1) != 1) _exit(5);
    char go = 0;
    ReadAll(to_child[0], &go, 1);
    raise(SIGKILL);
    _exit(6);
  }
  Result<std::unique_ptr<VerbsTransport>> transport = VerbsTransport::Create(Context(0, comm_id));
  REQUIRE(transport.ok());
  REQUIRE(transport.value() != nullptr);
  std::string mine = transport.value()->LocalAddress();
  mine.resize(128);
  char theirs[128] = {};
  REQUIRE(write(to_child[1], mine.data(), 128) == 128);
  REQUIRE(ReadAll(to_parent[0], theirs, 128));
  Result<std::unique_ptr<Connection>> connection =
      transport.value()->Connect(1, theirs, Deadline::AfterMs(20000));
  REQUIRE(connection.ok());
  uint64_t hello = 0;
  REQUIRE(connection.value()->PostRecv(&hello, 8, 0)->Wait(Deadline::AfterMs(20000)).ok());
  CHECK(hello == 0x600d);
  char linked = 0;
  REQUIRE(ReadAll(to_parent[0], &linked, 1));
  std::vector<uint8_t> in(4096);
  RequestPtr recv = connection.value()->PostRecv(in.data(), in.size(), 1);
  char go = 'g';
  REQUIRE(write(to_child[1], &go, 1) == 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  auto start = std::chrono::steady_clock::now();
  Status got = recv->Wait(Deadline::AfterMs(15000));
  auto took = std::chrono::steady_clock::now() - start;
  INFO(got.ToString());
  CHECK(got.code() == Code::kRemoteError);
  CHECK(Contains(got.message(), "rank 1 is gone"));
  CHECK(took < std::chrono::seconds(3));
  // A send to it fails too, with the same error, at once.
  std::vector<uint8_t> out(64, 1);
  RequestPtr send = connection.value()->PostSend(out.data(), out.size(), 2);
  CHECK(send->Wait(Deadline::AfterMs(5000)).code() == Code::kRemoteError);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

// Sets an environment variable for the scope of one test (single-threaded here).
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

TEST_CASE("verbs: BRAID_IB_* settings select the port or fail naming the variable", "[verbs]") {
  SECTION("an out-of-range value is an error naming the variable") {
    ScopedEnv env("BRAID_IB_TIMEOUT", "40");
    Result<std::unique_ptr<VerbsTransport>> made = VerbsTransport::Create(Context(0, 1));
    REQUIRE_FALSE(made.ok());
    CHECK(made.status().code() == Code::kInvalidArgument);
    CHECK(Contains(made.status().message(), "BRAID_IB_TIMEOUT"));
  }
  SECTION("BRAID_IB_HCA excluding the only device leaves verbs unavailable, not broken") {
    ScopedEnv env("BRAID_IB_HCA", "^braid_verbs_model");
    Result<std::unique_ptr<VerbsTransport>> made = VerbsTransport::Create(Context(0, 1));
    REQUIRE(made.ok());
    CHECK(made.value() == nullptr);
  }
  SECTION("BRAID_IB_HCA naming the device and port selects it") {
    ScopedEnv env("BRAID_IB_HCA", "=braid_verbs_model_0:1");
    Result<std::unique_ptr<VerbsTransport>> made = VerbsTransport::Create(Context(0, 1));
    REQUIRE(made.ok());
    CHECK(made.value() != nullptr);
  }
  SECTION("a GID index the port lacks is an error naming BRAID_IB_GID_INDEX") {
    ScopedEnv env("BRAID_IB_GID_INDEX", "3");
    Result<std::unique_ptr<VerbsTransport>> made = VerbsTransport::Create(Context(0, 1));
    REQUIRE_FALSE(made.ok());
    CHECK(Contains(made.status().message(), "BRAID_IB_GID_INDEX"));
  }
}

}  // namespace
}  // namespace braid::transport::ibverbs
