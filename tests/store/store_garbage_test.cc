// 1000 hostile connections to the store (random bytes, half frames, connect-and-close, wrong
// secrets, forged proofs) while 4 ranks (the communicator fixture's, on this test's server)
// rendezvous through it and allreduce: the ranks do not notice, and the server's counters show
// every bad connection refused and closed.
//
// Catch2 v2 is not thread-safe: worker threads only record; the main thread asserts.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "rendezvous/unique_id.h"
#include "tests/harness/communicator.h"
#include "tests/store/store_test_util.h"

namespace braid::rendezvous {
namespace {

namespace p = protocol;
using testing::Eventually;
using testing::RawSocket;
using testing::Soon;

constexpr int kRanks = 4;
constexpr int kGarbageThreads = 4;
constexpr int kGarbagePerThread = 250;
constexpr int kKinds = 6;

// One hostile connection of kind `kind`; returns false if it could not even connect.
bool Attack(int port, int kind, std::mt19937* rng) {
  if (kind == 3) {  // a rank of another job: the real client with another secret
    auto other = TcpStoreClient::Connect("127.0.0.1", port, "another job's secret", Soon());
    return !other.ok();
  }
  RawSocket raw(port);
  if (!raw.ok()) return false;
  switch (kind) {
    case 0: {  // random bytes
      std::string junk(1 + (*rng)() % 300, '\0');
      for (char& c : junk) c = static_cast<char>((*rng)());
      raw.Send(junk);
      break;
    }
    case 1: {  // half a HELLO
      p::Request hello;
      hello.op = p::Op::kHello;
      hello.request_id = 1;
      hello.nonce = std::string(p::kAuthBytes, 'h');
      std::string frame = p::EncodeRequest(hello);
      raw.Send(frame.substr(0, 1 + (*rng)() % (frame.size() - 1)));
      break;
    }
    case 2:  // connect and close
      break;
    case 4: {  // HELLO, then a forged AUTH proof
      raw.SendHello();
      p::Request auth;
      auth.op = p::Op::kAuth;
      auth.request_id = 2;
      auth.proof = std::string(p::kAuthBytes, '\0');
      for (char& c : auth.proof) c = static_cast<char>((*rng)());
      raw.Send(p::EncodeRequest(auth));
      break;
    }
    case 5: {  // requests without any handshake, one of them announcing a huge body
      p::Request set;
      set.op = p::Op::kSet;
      set.request_id = 1;
      set.keys = {"comm/poison"};
      set.values = {"x"};
      const std::string huge("BRST\x00\x02\x00\x02\x00\x00\x00\x01\xff\xff\xff\xff", 16);
      raw.Send((*rng)() % 2 ? p::EncodeRequest(set) : huge);
      break;
    }
  }
  raw.Close();
  return true;
}

TEST_CASE("1000 garbage connections during a real rendezvous do not disturb it",
          "[store][auth][stress]") {
  testing::RaiseFileLimit();
  UniqueIdFields fields;
  fields.host = "127.0.0.1";
  fields.token = RandomToken().value();
  StoreServerOptions options;
  options.secret = fields.token;  // as braidGetUniqueId does
  auto server = testing::StartServer(options);
  REQUIRE(server);
  fields.port = server->port();
  braidUniqueId id;
  REQUIRE(EncodeUniqueId(fields, id.internal).ok());

  const int64_t hostile = kGarbageThreads * kGarbagePerThread;
  std::atomic<int> attacks{0};
  std::atomic<int> failed_to_connect{0};
  std::atomic<int> wrong_proofs{0};
  std::vector<std::thread> garbage;
  for (int g = 0; g < kGarbageThreads; ++g) {
    garbage.emplace_back([&, g] {
      std::mt19937 rng(1000 + g);
      for (int i = 0; i < kGarbagePerThread; ++i) {
        const int kind = (g + i) % kKinds;
        if (!Attack(server->port(), kind, &rng)) failed_to_connect++;
        if (kind == 3 || kind == 4) wrong_proofs++;
        attacks++;
      }
    });
  }

  // The ranks start while the attack is under way, the last one well into it, so the whole
  // rendezvous runs under fire.
  braid::testing::CommJob job;
  job.size = kRanks;
  job.ids = {id};
  job.config.timeoutMs = 20000;
  job.before_init = [&](int rank, int) -> std::string {
    const int start_after = rank == kRanks - 1 ? 400 : 100;
    while (attacks.load() < start_after) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return "";
  };
  auto results = braid::testing::RunComms(job, [](braidComm_t comm, int rank, int) {
    std::vector<float> data(4096);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank + 1) * (i % 7);
    BRAID_TRY(braidAllReduce(data.data(), data.data(), data.size(), braidFloat32, braidSum, comm,
                             nullptr),
              "allreduce");
    const float ranks_sum = kRanks * (kRanks + 1) / 2.0f;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != ranks_sum * (i % 7)) return "allreduce result wrong at " + std::to_string(i);
    }
    return std::string();
  });
  for (auto& t : garbage) t.join();
  BRAID_CHECK_RANKS(results);
  REQUIRE(failed_to_connect.load() == 0);

  // Every connection ends up closed; every hostile one was refused before authenticating. The
  // wait includes the refusals themselves: a stranger that connected and closed at once may
  // still be in the listener's queue after its thread is done, and until the server accepts it
  // the other counts already add up.
  REQUIRE(Eventually(
      [&] {
        StoreServerStats s = server->Stats();
        return s.open_connections == 0 && s.handshakes_refused >= hostile &&
               s.connections_accepted == s.connections_authenticated + s.handshakes_refused;
      },
      10000));
  StoreServerStats stats = server->Stats();
  INFO("accepted " << stats.connections_accepted << ", authenticated "
                   << stats.connections_authenticated << ", refused " << stats.handshakes_refused
                   << ", wrong secrets " << stats.wrong_secrets);
  CHECK(stats.handshakes_refused == hostile);
  CHECK(stats.connections_closed_for_errors >= hostile);
  CHECK(stats.connections_authenticated >= kRanks);
  // Kinds 3 (wrong secret) and 4 (forged proof) each reach AUTH with a wrong proof.
  CHECK(stats.wrong_secrets == wrong_proofs.load());
  // Nothing the strangers sent reached the data: only the ranks' own keys exist.
  auto probe = TcpStoreClient::Connect("127.0.0.1", server->port(), fields.token, Soon());
  REQUIRE(probe.ok());
  auto keys = (*probe)->ListKeys(Soon());
  REQUIRE(keys.ok());
  for (const std::string& key : *keys) CHECK(key.find("poison") == std::string::npos);
}

}  // namespace
}  // namespace braid::rendezvous
