// rendezvous_scale: how long a job of n ranks takes to bootstrap through braid's store, and what
// it costs the process, at 64, 256 and 1024 ranks (docs/PERFORMANCE.md, "Rendezvous at scale";
// bench/rendezvous/tcpstore_scale.py does the same exchange through c10d's TCPStore).
//
//   bazel build //bench/rendezvous:rendezvous_scale
//   bazel-bin/bench/rendezvous/rendezvous_scale [--ranks 64,256,1024] [--exchange table|all]
//                                               [--repeat 3] [--hold table|records]
//
// Every rank is a thread of this process with its own authenticated store connection to a real
// TcpStoreServer on loopback (one io thread, as rank 0 or braidrun host it). A rank's bootstrap:
//   connect   TcpStoreClient::Connect (TCP connect + HELLO/AUTH)
//   exchange  --exchange table (what communicators do): rendezvous::ExchangePeerTable, then
//             FetchPeer of its two ring neighbours (the links a communicator makes at init);
//             --exchange all (the all-to-all braid did before, and Gloo's full mesh does): the
//             same size and claim checks, publish, wait for all n records, read all n;
//             then a store barrier of all ranks.
//   hold      what each rank keeps of the table afterwards, as a communicator and its link pool
//             do (timed, and held until the memory is sampled): --hold table (communicators
//             since the peer table reached them: the table, one entry per host, twice) or
//             --hold records (before: the table expanded to one record per rank, twice: the
//             communicator's vector and the copy its link pool got).
// Each rank publishes a distinct record (host per 8 ranks, two addresses) and checks every
// record it read against the record that rank was given, so a wrong answer fails the run.
//
// Printed per size: connect (start of the threads to the last rank connected), exchange (all
// ranks released at once to the last rank through the barrier; the bootstrap the comparison is
// about), the CPU time the process (server and every rank) spent on it, the process's resident
// memory growth with every connection still open (the server's
// state and n clients; what each rank read is checked, untimed, and dropped by then), and the
// server's key count. The machine's load average is printed with the results.
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "rendezvous/peer_exchange.h"
#include "rendezvous/peer_table.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"

namespace {

using braid::Deadline;
using braid::Status;
using braid::rendezvous::PeerRecord;
using Clock = std::chrono::steady_clock;

constexpr int64_t kTimeoutMs = 300 * 1000;
constexpr char kSecret[] = "rendezvous-scale-bench-secret";

// The record rank `r` publishes: 8 ranks per host, addresses unique to the rank.
PeerRecord RecordOf(int r) {
  PeerRecord record;
  record.host = "node" + std::to_string(r / 8);
  record.boot_id = "boot-" + std::to_string(r / 8);
  record.cpus = 8;
  record.addresses = {{"shm", "braid-bench-" + std::to_string(r)},
                      {"tcp", "10.1." + std::to_string(r / 256) + "." + std::to_string(r % 256) +
                                  ":" + std::to_string(20000 + r)}};
  return record;
}

// Resident memory of this process in KiB (VmRSS), 0 if unreadable.
long ResidentKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

// CPU time this process has used, user and system, in ms.
double ProcessCpuMs() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// A meeting point: rank threads Arrive and the main thread awaits n arrivals; the main thread
// Opens it and rank threads AwaitOpen.
class Gate {
 public:
  void Arrive() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++arrived_;
    changed_.notify_all();
  }
  void AwaitArrivals(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return arrived_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void AwaitOpen() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  bool open_ = false;
};

// Releases every waiting rank thread at once: they wait in poll() on a pipe whose write end Open
// closes. Why not a Gate: 1024 threads woken by notify_all take its mutex again one after another,
// which took 0.2-0.3 s here, all of it charged to the exchange.
class StartLine {
 public:
  StartLine() {
    if (pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~StartLine() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  bool ok() const { return fds_[0] >= 0; }
  void Open() {
    close(fds_[1]);
    fds_[1] = -1;
  }
  void AwaitOpen() {
    pollfd line{fds_[0], POLLIN, 0};
    while (poll(&line, 1, -1) < 0 && errno == EINTR) {
    }
  }

 private:
  int fds_[2];
};

// "" or what was wrong with what `rank` read.
std::string CheckRecord(int rank, int of, const PeerRecord& got, bool with_addresses) {
  PeerRecord want = RecordOf(of);
  if (!with_addresses) want = braid::rendezvous::IdentityOf(want);
  if (got.Serialize() == want.Serialize()) return "";
  return "rank " + std::to_string(rank) + " read a wrong record for rank " + std::to_string(of);
}

// What a rank read: the peer table and its neighbours' records, or every record.
struct Read {
  braid::rendezvous::PeerTable table;
  std::vector<std::pair<int, PeerRecord>> full;
};

// "" or what was wrong with what `rank` read (checked after the clock stops: comparing a
// thousand records per rank is the bench's work, not the exchange's).
std::string Check(int rank, int size, const Read& read) {
  if (read.table.size() > 0 && read.table.size() != size) {
    return "rank " + std::to_string(rank) + " read a peer table of the wrong size";
  }
  for (int r = 0; r < read.table.size(); ++r) {
    std::string wrong = CheckRecord(rank, r, read.table[r], false);
    if (!wrong.empty()) return wrong;
  }
  for (const auto& [peer, record] : read.full) {
    std::string wrong = CheckRecord(rank, peer, record, true);
    if (!wrong.empty()) return wrong;
  }
  return "";
}

// The all-to-all exchange: every rank reads every record.
std::string ExchangeAll(braid::rendezvous::Store& store, int rank, int size, Deadline deadline,
                        Read* read) {
  auto agreed = store.CompareSet("nranks", "", std::to_string(size), deadline);
  if (!agreed.ok()) return agreed.status().ToString();
  if (agreed.value() != std::to_string(size)) return "nranks disagree";
  auto claims = store.Add("claim/" + std::to_string(rank), 1, deadline);
  if (!claims.ok()) return claims.status().ToString();
  Status set = store.Set("peer/" + std::to_string(rank), RecordOf(rank).Serialize(), deadline);
  if (!set.ok()) return set.ToString();
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("peer/" + std::to_string(r));
  Status waited = store.Wait(keys, deadline);
  if (!waited.ok()) return waited.ToString();
  auto values = store.MultiGet(keys, deadline);
  if (!values.ok()) return values.status().ToString();
  for (int r = 0; r < size; ++r) {
    auto record = PeerRecord::Parse(values.value()[static_cast<size_t>(r)]);
    if (!record.ok()) return record.status().ToString();
    read->full.emplace_back(r, std::move(record).value());
  }
  return "";
}

// The communicators' exchange: the peer table, then the two ring neighbours' full records.
std::string ExchangeTable(braid::rendezvous::Store& store, int rank, int size, Deadline deadline,
                          Read* read) {
  auto table = braid::rendezvous::ExchangePeerTable(store, rank, size, RecordOf(rank), deadline);
  if (!table.ok()) return table.status().ToString();
  read->table = std::move(table).value();
  for (int peer : {(rank + 1) % size, (rank + size - 1) % size}) {
    auto record = braid::rendezvous::FetchPeer(store, peer, deadline);
    if (!record.ok()) return record.status().ToString();
    read->full.emplace_back(peer, std::move(record).value());
  }
  return "";
}

struct Outcome {
  double connect_ms = 0;
  double exchange_ms = 0;
  double cpu_ms = 0;  // the process's CPU time (server and ranks) from release to the last rank
  double rss_mib = 0;
  int64_t keys = 0;
  std::string error;
};

// What a rank keeps of the peer table (--hold).
struct Held {
  braid::rendezvous::PeerTable tables[2];
  std::vector<PeerRecord> records[2];
};

Outcome RunOnce(int size, bool table, bool hold_records) {
  Outcome outcome;
  braid::rendezvous::StoreServerOptions options;
  options.secret = kSecret;
  auto server = braid::rendezvous::TcpStoreServer::Start("127.0.0.1", 0, options);
  if (!server.ok()) {
    outcome.error = server.status().ToString();
    return outcome;
  }
  const int port = server.value()->port();
  const long rss_before = ResidentKiB();
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<Clock::time_point> done(static_cast<size_t>(size));
  // through: every rank is through the barrier; checked: every rank has checked what it read.
  Gate connected, through, check, checked, release;
  StartLine go;
  if (!go.ok()) {
    outcome.error = std::string("pipe: ") + std::strerror(errno);
    return outcome;
  }
  const auto start = Clock::now();
  std::vector<std::thread> ranks;
  ranks.reserve(static_cast<size_t>(size));
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      const Deadline deadline = Deadline::AfterMs(kTimeoutMs);
      std::string& error = errors[static_cast<size_t>(rank)];
      auto client =
          braid::rendezvous::TcpStoreClient::Connect("127.0.0.1", port, kSecret, deadline);
      connected.Arrive();
      go.AwaitOpen();
      if (!client.ok()) {
        error = client.status().ToString();
        through.Arrive();
        checked.Arrive();
        return;
      }
      braid::rendezvous::PrefixStore store(std::move(client).value(), "comm");
      Held held;  // until the memory has been sampled
      {
        Read read;
        error = table ? ExchangeTable(store, rank, size, deadline, &read)
                      : ExchangeAll(store, rank, size, deadline, &read);
        if (error.empty() && table) {
          for (int copy = 0; copy < 2; ++copy) {
            if (hold_records) {
              held.records[copy] = read.table.Expand();
            } else {
              held.tables[copy] = read.table;
            }
          }
        }
        if (error.empty()) {
          Status barrier = store.Barrier("bootstrap_done", size, deadline);
          if (!barrier.ok()) error = barrier.ToString();
        }
        done[static_cast<size_t>(rank)] = Clock::now();
        through.Arrive();
        // Checked only once every rank is through, so checking takes no CPU from the exchange.
        check.AwaitOpen();
        if (error.empty()) error = Check(rank, size, read);
      }
      checked.Arrive();
      // Hold the connection until the memory has been sampled.
      release.AwaitOpen();
    });
  }
  connected.AwaitArrivals(size);
  const auto all_connected = Clock::now();
  const double cpu_before = ProcessCpuMs();
  go.Open();
  through.AwaitArrivals(size);
  outcome.cpu_ms = ProcessCpuMs() - cpu_before;
  const auto all_done = *std::max_element(done.begin(), done.end());
  check.Open();
  checked.AwaitArrivals(size);
  outcome.rss_mib = static_cast<double>(ResidentKiB() - rss_before) / 1024.0;
  outcome.keys = server.value()->Stats().keys;
  release.Open();
  for (auto& t : ranks) t.join();
  outcome.connect_ms = std::chrono::duration<double, std::milli>(all_connected - start).count();
  outcome.exchange_ms = std::chrono::duration<double, std::milli>(all_done - all_connected).count();
  int failed = 0;
  for (const std::string& e : errors) {
    if (e.empty()) continue;
    if (failed++ == 0) outcome.error = e;
  }
  if (failed > 0) outcome.error = std::to_string(failed) + " ranks failed; first: " + outcome.error;
  return outcome;
}

std::vector<int> ParseSizes(const std::string& text) {
  std::vector<int> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const int n = std::atoi(item.c_str());
    if (n < 1 || n > 65536) {
      std::fprintf(stderr, "rendezvous_scale: bad rank count '%s' (1..65536)\n", item.c_str());
      std::exit(2);
    }
    sizes.push_back(n);
  }
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {64, 256, 1024};
  std::string exchange = "table";
  std::string hold = "table";
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--ranks" && has_value) {
      sizes = ParseSizes(argv[++i]);
    } else if (arg == "--exchange" && has_value) {
      exchange = argv[++i];
    } else if (arg == "--repeat" && has_value) {
      repeat = std::atoi(argv[++i]);
    } else if (arg == "--hold" && has_value) {
      hold = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: rendezvous_scale [--ranks 64,256,1024] [--exchange table|all] "
                   "[--repeat 3] [--hold table|records]\n");
      return 2;
    }
  }
  if ((exchange != "table" && exchange != "all") || (hold != "table" && hold != "records") ||
      repeat < 1) {
    std::fprintf(stderr,
                 "rendezvous_scale: --exchange is table or all, --hold table or records, "
                 "--repeat at least 1\n");
    return 2;
  }
  // Each rank holds a client socket and the server one per rank, all in this process.
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  std::printf("# braid store, ranks as threads, exchange=%s, hold=%s, load average before: %s\n",
              exchange.c_str(), exchange == "table" ? hold.c_str() : "-", LoadAverage().c_str());
  std::printf("%6s %4s %11s %12s %8s %9s %6s\n", "ranks", "run", "connect_ms", "exchange_ms",
              "cpu_ms", "rss_MiB", "keys");
  int status = 0;
  for (int size : sizes) {
    for (int run = 1; run <= repeat; ++run) {
      Outcome outcome = RunOnce(size, exchange == "table", hold == "records");
      if (!outcome.error.empty()) {
        std::printf("%6d %4d FAILED: %s\n", size, run, outcome.error.c_str());
        status = 1;
        continue;
      }
      std::printf("%6d %4d %11.1f %12.1f %8.1f %9.1f %6lld\n", size, run, outcome.connect_ms,
                  outcome.exchange_ms, outcome.cpu_ms, outcome.rss_mib,
                  static_cast<long long>(outcome.keys));
      std::fflush(stdout);
    }
  }
  std::printf("# load average after: %s\n", LoadAverage().c_str());
  return status;
}
