// A 1024-rank bootstrap through one real store server: every rank (a thread with its own
// authenticated connection) publishes its record, learns the peer table, reads its two ring
// neighbours' full records and passes a store barrier, as a communicator's init does
// (rendezvous/peer_table.h). Checked: every rank completes well inside the time bound, every
// identity and record read is the one its rank was given (expected values built here from the
// rank number, not from what the store returned), the server keeps O(n) keys, the table costs a
// few bytes per rank, and the server process's memory grows by a bounded amount.
//
// The server runs in a child process so its memory is measured apart from the 1024 client
// threads; it is forked before any thread exists.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/deadline.h"
#include "rendezvous/peer_exchange.h"
#include "rendezvous/peer_table.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"

namespace {

using braid::Deadline;
using braid::rendezvous::PeerRecord;

constexpr int kRanks = 1024;
constexpr int kRanksPerHost = 16;
constexpr char kSecret[] = "rendezvous-scale-test";
// Far above what it takes on a loaded 2-core machine (a few seconds), far below a hang.
constexpr int64_t kBootstrapLimitMs = 30 * 1000;
// The server's own growth: sessions, keys, parked waiters and the table replies queued at once
// (measured: ~10 MiB). Adding the all-to-all read the peer table replaced (every rank reads all
// 1024 records) took the server's peak to 106 MiB more than at start.
constexpr long kServerGrowthLimitKiB = 64 * 1024;

std::string Address(int rank) {
  return "10.2." + std::to_string(rank / 256) + "." + std::to_string(rank % 256);
}

PeerRecord RecordOf(int rank) {
  PeerRecord record;
  record.host = "host" + std::to_string(rank / kRanksPerHost);
  record.boot_id = "boot" + std::to_string(rank / kRanksPerHost);
  record.cpus = kRanksPerHost;
  record.addresses = {{"shm", "shm-" + std::to_string(rank)}, {"tcp", Address(rank) + ":7"}};
  return record;
}

// What rank `rank` must be seen as, spelled out field by field.
std::string ExpectedFields(int rank, bool with_addresses) {
  const std::string host = std::to_string(rank / kRanksPerHost);
  std::string out = "host" + host + "|boot" + host + "|" + std::to_string(kRanksPerHost);
  out += with_addresses ? "|shm=shm-" + std::to_string(rank) + "|tcp=" + Address(rank) + ":7"
                        : "|shm=|tcp=";
  return out;
}

std::string Fields(const PeerRecord& record) {
  std::string out = record.host + "|" + record.boot_id + "|" + std::to_string(record.cpus);
  for (const auto& [name, address] : record.addresses) out += "|" + name + "=" + address;
  return out;
}

long StatusKiB(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return -1;
}

// A TcpStoreServer in a child process: port() once it listens; the child ends when this
// object is destroyed (its end of the pipe closes).
class ServerProcess {
 public:
  ServerProcess() {
    int to_parent[2], from_parent[2];
    if (pipe(to_parent) != 0 || pipe(from_parent) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(to_parent[0]);
      close(from_parent[1]);
      braid::rendezvous::StoreServerOptions options;
      options.secret = kSecret;
      auto server = braid::rendezvous::TcpStoreServer::Start("127.0.0.1", 0, options);
      int port = server.ok() ? server.value()->port() : -1;
      if (write(to_parent[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
      char byte;
      while (read(from_parent[0], &byte, 1) > 0) {
      }
      _exit(0);  // the server thread dies with the process
    }
    close(to_parent[1]);
    close(from_parent[0]);
    hold_ = from_parent[1];
    if (pid_ < 0 || read(to_parent[0], &port_, sizeof(port_)) != sizeof(port_)) port_ = -1;
    close(to_parent[0]);
  }
  ~ServerProcess() {
    if (hold_ >= 0) close(hold_);
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  int hold_ = -1;
};

}  // namespace

TEST_CASE("1024 ranks bootstrap through one store server in bounded time and memory",
          "[rendezvous][scale]") {
  // 1024 client sockets live in this process.
  rlimit limit{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  REQUIRE(limit.rlim_cur >= static_cast<rlim_t>(kRanks + 64));

  ServerProcess server;
  REQUIRE(server.port() > 0);
  const long server_start_kib = StatusKiB(server.pid(), "VmRSS");
  REQUIRE(server_start_kib > 0);

  std::vector<std::string> results(kRanks);
  std::vector<int64_t> finished_ms(kRanks, -1);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  ranks.reserve(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      std::string& result = results[static_cast<size_t>(rank)];
      const Deadline deadline = Deadline::AfterMs(2 * kBootstrapLimitMs);
      auto client =
          braid::rendezvous::TcpStoreClient::Connect("127.0.0.1", server.port(), kSecret, deadline);
      if (!client.ok()) {
        result = "connect: " + client.status().ToString();
        return;
      }
      braid::rendezvous::PrefixStore store(std::move(client).value(), "comm");
      auto table =
          braid::rendezvous::ExchangePeerTable(store, rank, kRanks, RecordOf(rank), deadline);
      if (!table.ok()) {
        result = "exchange: " + table.status().ToString();
        return;
      }
      std::vector<std::pair<int, PeerRecord>> neighbours;
      for (int peer : {(rank + 1) % kRanks, (rank + kRanks - 1) % kRanks}) {
        auto record = braid::rendezvous::FetchPeer(store, peer, deadline);
        if (!record.ok()) {
          result = "fetch: " + record.status().ToString();
          return;
        }
        neighbours.emplace_back(peer, std::move(record).value());
      }
      braid::Status barrier = store.Barrier("bootstrap_done", kRanks, deadline);
      if (!barrier.ok()) {
        result = "barrier: " + barrier.ToString();
        return;
      }
      finished_ms[static_cast<size_t>(rank)] =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                start)
              .count();
      if (table.value().size() != kRanks || table.value().distinct() != kRanks / kRanksPerHost) {
        result = "a table of " + std::to_string(table.value().size()) + " ranks and " +
                 std::to_string(table.value().distinct()) + " identities";
        return;
      }
      for (int r = 0; r < kRanks; ++r) {
        if (Fields(table.value()[r]) != ExpectedFields(r, false)) {
          result = "rank " + std::to_string(r) + " in the table is " +
                   Fields(table.value()[r]);
          return;
        }
      }
      for (const auto& [peer, record] : neighbours) {
        if (Fields(record) != ExpectedFields(peer, true)) {
          result = "neighbour " + std::to_string(peer) + " is " + Fields(record);
          return;
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  const long server_peak_kib = StatusKiB(server.pid(), "VmHWM");

  int failed = 0;
  for (int rank = 0; rank < kRanks; ++rank) {
    if (results[static_cast<size_t>(rank)].empty()) continue;
    if (++failed <= 5) UNSCOPED_INFO("rank " << rank << ": " << results[static_cast<size_t>(rank)]);
  }
  CHECK(failed == 0);
  int64_t slowest_ms = 0;
  for (int64_t ms : finished_ms) slowest_ms = std::max(slowest_ms, ms);
  std::printf("%d ranks through the barrier after %lld ms; store server resident %ld KiB at start, "
              "peak %ld KiB\n",
              kRanks, static_cast<long long>(slowest_ms), server_start_kib, server_peak_kib);
  INFO("slowest rank through the barrier after " << slowest_ms << " ms");
  CHECK(slowest_ms < kBootstrapLimitMs);
  INFO("store server resident memory: " << server_start_kib << " KiB at start, peak "
                                        << server_peak_kib << " KiB");
  CHECK(server_peak_kib - server_start_kib < kServerGrowthLimitKiB);

  // The store's state after the bootstrap, read through a fresh connection: O(n) keys (nranks,
  // a claim and a record per rank, the count, the table) and a table of a few bytes per rank.
  auto client = braid::rendezvous::TcpStoreClient::Connect("127.0.0.1", server.port(), kSecret,
                                                           Deadline::AfterMs(10000));
  REQUIRE(client.ok());
  auto keys = client.value()->NumKeys(Deadline::AfterMs(10000));
  REQUIRE(keys.ok());
  CHECK(keys.value() == 2 * kRanks + 3);
  auto table = client.value()->Get("comm/peer_table", Deadline::AfterMs(10000));
  REQUIRE(table.ok());
  INFO("peer table: " << table.value().size() << " bytes");
  // 64 distinct identities of ~60 bytes, and at most 3 digits and a separator per rank.
  CHECK(table.value().size() < 64 * 100 + 4 * kRanks + 64);
}
