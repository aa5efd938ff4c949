// calibrate: measures the numbers of braid's cost model (LinkModel, algorithms/algorithm.h) on
// this host, per transport, and writes them to the calibration file every braid process reads
// (algorithms/calibration.h; the format is in docs/ALGORITHMS.md, "Calibration file").
//
//   bazel build //bench:calibrate
//   nice -n -19 bazel-bin/bench/calibrate                # measure, print the file it would write
//   nice -n -19 bazel-bin/bench/calibrate --write        # ... and write it where braid reads it:
//                                                        # $BRAID_CALIBRATION, else
//                                                        # $XDG_CACHE_HOME/braid/calibration, else
//                                                        # ~/.cache/braid/calibration
//   nice -n -19 bazel-bin/bench/calibrate --write PATH   # ... or to PATH
//   bazel-bin/bench/calibrate --picks    # what the selector picks under this process's
//                                        # calibration (BRAID_CALIBRATION=PATH: that file's)
//   # tcp between hosts, one job over two hosts (or more) started by braidrun on each:
//   braidrun -n 2 --nnodes 2 --node-rank K --master-addr HOST0 --master-port P -- \
//       bazel-bin/bench/calibrate --across-hosts --write PATH
//
// Why a mode across hosts: on one host "tcp" is loopback, about as fast as shared memory, while
// the tcp entry is what prices every step between hosts in a job that spans them (the slowest
// transport's model; shared memory's inside each host). --across-hosts measures, between rank 0
// and the lowest rank on another host (one on other CPUs where the hosts share a machine), the
// step latency and the 16 MiB exchange rate as below, then times an 8-byte direct allreduce of the
// whole job and solves tcp.fan_out_us, the network's price per message in flight, from the
// model's price of it (only where each rank has two peers or more on other hosts: -n 2 or more).
// Rank 0 writes the tcp entry (latency_us and latency_us_core_per_rank alike: a step between hosts
// is the network's either way) and keeps every other entry as the file at PATH states it, so
// running the one-host calibrate first and this second gives shm from the host and tcp from the
// network. A single-host job forced onto tcp (BRAID_TRANSPORTS=tcp) is then priced with the
// network's numbers too.
//
// Nothing is written without --write: every braid process of this user on this host reads the
// file, so replacing it is a choice, not a side effect of measuring.
//
// For each transport (shm, tcp), two ranks as forked processes, each number the best of many
// short rounds (3 significant digits written):
// - latency_us_core_per_rank: one algorithm step: an 8-byte allreduce forced to recursive
//   doubling, which is one exchange and a 2-element reduction. The model prices that call as
//   latency + message + (tiny transfer and reduction); the file gets the latency that makes the
//   model's price equal the measured time, the message cost staying the built-in one. Only where
//   this process may use 2 CPUs or more (else both ranks share one, which is not this key).
// - bandwidth_gbps: the per-direction rate of 16 MiB messages when both ranks send to each other
//   at once, as every rank does in every collective (through the shared ring on shm).
// - shm.single_copy_bytes, shm.single_copy_bytes_shared_cores and shm.single_copy_gbps: the same
//   exchange size by size (64 KiB to 16 MiB) through the ring and by single copy
//   (process_vm_readv), with a CPU per rank and with both ranks on one CPU, and the size from
//   which single copy wins in each (bench/single_copy_measure.h; algorithms/single_copy_choice.h
//   reads them).
// and once (both transports reduce with the same CPU loops): reduce_gbps, kernels::ReduceInto on
// float32 sum over a chunk-sized (512 KiB, cache-resident, as the pipelined algorithms reduce)
// buffer, and memory_reduce_gbps over 64 MiB. Printed for reference only: the one-way latency of
// a braidSend/braidRecv ping-pong, an 8-byte exchange group, and the one-way streaming rate.
// The other keys come from fits to bench/select_check.py runs, not from one measurement: the
// step latency with ranks sharing cores (a wake-up, whose time depends on how many ranks take
// turns and on the machine's load; two ranks pinned to one CPU measure 100-200 us here, far from
// the 4-ranks-on-2-CPUs jobs it prices), the message, pipeline and fan-out costs and the cache
// size. The file lists them commented out with their built-in values.
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/calibration.h"
#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "bench/forked_pair.h"
#include "bench/single_copy_measure.h"
#include "bindings/c/braid.h"
#include "core/base/datatype.h"
#include "kernels/cpu/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;
using braid::algorithms::Calibration;
using braid::algorithms::CalibrationValues;
using braid::algorithms::LinkModel;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

bool Check(braidResult_t rc, braidComm_t comm, const char* what) {
  if (rc == braidSuccess) return true;
  std::fprintf(stderr, "calibrate: %s failed: %s: %s\n", what, braidGetErrorString(rc),
               braidGetLastError(comm));
  return false;
}

struct Numbers {
  double latency_us = 0;
  double exchange_latency_us = 0;
  double step_latency_us = 0;
  double oneway_gbps = 0;
  double exchange_gbps = 0;
};

// How many rounds each measurement takes (the first warms up; the best of the others counts).
struct Rounds {
  int small = 40;         // rounds of the 8-byte measurements
  int round_trips = 200;  // calls per 8-byte round
  int large = 20;         // rounds of the 16 MiB measurements
  int large_messages = 4; // 16 MiB messages per round
};
// On one host: many short rounds, so that the quietest shows what braid itself costs.
constexpr Rounds kOneHostRounds{};
// Across hosts a 16 MiB message takes ~0.14 s on a 1 Gbit/s link: a few rounds of one message
// (a shaped link's rate does not vary as a loaded CPU's does).
constexpr Rounds kAcrossHostsRounds{20, 100, 6, 1};

// Runs the transport measurements on `comm`, a 2-rank communicator whose allreduce is forced to
// recursive doubling, as `rank`; rank 0 fills `out`.
bool MeasureLinks(braidComm_t comm, int rank, const Rounds& rounds, Numbers* out) {
  const int peer = 1 - rank;
  bool ok = true;

  // Every number is the best of many short rounds (the first round warms up): on a 2-core machine
  // shared with other work, the quietest round is the one that shows what braid itself costs.
  char small[8] = {0}, small_in[8] = {0};
  const int kRounds = rounds.small;
  const int kRoundTrips = rounds.round_trips;
  double best_rtt = 1e9;
  for (int round = 0; round < kRounds && ok; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < kRoundTrips && ok; ++i) {
      if (rank == 0) {
        ok = Check(braidSend(small, 8, braidUint8, peer, comm, nullptr), comm, "send") &&
             Check(braidRecv(small, 8, braidUint8, peer, comm, nullptr), comm, "recv");
      } else {
        ok = Check(braidRecv(small, 8, braidUint8, peer, comm, nullptr), comm, "recv") &&
             Check(braidSend(small, 8, braidUint8, peer, comm, nullptr), comm, "send");
      }
    }
    if (round > 0) best_rtt = std::min(best_rtt, Seconds(start) / kRoundTrips);  // round 0 warms up
  }
  out->latency_us = best_rtt / 2 * 1e6;

  // Exchange step: both ranks send 8 bytes to each other at once and wait for both (a group), as
  // every step of ring and recursive doubling does; the peer is busy too, so waits stay short.
  double best_step = 1e9;
  for (int round = 0; round < kRounds && ok; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < kRoundTrips && ok; ++i) {
      ok = Check(braidGroupStart(), comm, "group start") &&
           Check(braidSend(small, 8, braidUint8, peer, comm, nullptr), comm, "send") &&
           Check(braidRecv(small_in, 8, braidUint8, peer, comm, nullptr), comm, "recv") &&
           Check(braidGroupEnd(), comm, "group end");
    }
    if (round > 0) best_step = std::min(best_step, Seconds(start) / kRoundTrips);
  }
  out->exchange_latency_us = best_step * 1e6;

  // One algorithm step: an 8-byte allreduce forced to recursive doubling is exactly one exchange
  // between the two ranks plus a 2-element reduction.
  float values[2] = {1.0f, 2.0f};
  double best_allreduce = 1e9;
  for (int round = 0; round < kRounds && ok; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < kRoundTrips && ok; ++i) {
      ok = Check(braidAllReduce(values, values, 2, braidFloat32, braidMax, comm, nullptr), comm,
                 "allreduce");
    }
    if (round > 0) best_allreduce = std::min(best_allreduce, Seconds(start) / kRoundTrips);
  }
  out->step_latency_us = best_allreduce * 1e6;

  {
    // One-way streaming: rank 0 sends kMessages large messages, rank 1 acknowledges the last.
    const size_t kBytes = size_t{16} << 20;
    const int kMessages = rounds.large_messages;
    std::vector<char> big(kBytes, 1), other(kBytes, 2);
    double best_oneway = 1e9;
    for (int round = 0; round < rounds.large && ok; ++round) {
      auto start = Clock::now();
      for (int i = 0; i < kMessages && ok; ++i) {
        ok = rank == 0
                 ? Check(braidSend(big.data(), kBytes, braidUint8, peer, comm, nullptr), comm, "send")
                 : Check(braidRecv(big.data(), kBytes, braidUint8, peer, comm, nullptr), comm, "recv");
      }
      ok = ok && (rank == 0 ? Check(braidRecv(small, 1, braidUint8, peer, comm, nullptr), comm, "recv")
                            : Check(braidSend(small, 1, braidUint8, peer, comm, nullptr), comm, "send"));
      if (round > 0) best_oneway = std::min(best_oneway, Seconds(start));
    }
    out->oneway_gbps = static_cast<double>(kBytes) * kMessages / best_oneway / 1e9;

    // Exchange: both ranks send and receive at once (a group, so neither blocks the other).
    double best_exchange = 1e9;
    for (int round = 0; round < rounds.large && ok; ++round) {
      auto start = Clock::now();
      for (int i = 0; i < kMessages && ok; ++i) {
        ok = Check(braidGroupStart(), comm, "group start") &&
             Check(braidSend(big.data(), kBytes, braidUint8, peer, comm, nullptr), comm, "send") &&
             Check(braidRecv(other.data(), kBytes, braidUint8, peer, comm, nullptr), comm, "recv") &&
             Check(braidGroupEnd(), comm, "group end");
      }
      if (round > 0) best_exchange = std::min(best_exchange, Seconds(start));
    }
    out->exchange_gbps = static_cast<double>(kBytes) * kMessages / best_exchange / 1e9;
  }
  return ok;
}

// The 2-rank communicator of one forked rank over `transports`, its allreduce forced to
// recursive doubling (the step measurement: one exchange, whatever the model says).
bool MeasureForkedRank(int rank, const braidUniqueId& id, const char* transports, Numbers* out) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.transports = transports;
  config.algo = "allreduce:rd";
  config.shmSingleCopyBytes = 0;  // the ring's rate, whatever the file in use chose
  braidComm_t comm = nullptr;
  if (!Check(braidCommInitRankConfig(&comm, 2, id, rank, &config), nullptr, "braidCommInitRank")) {
    return false;
  }
  const bool ok = MeasureLinks(comm, rank, kOneHostRounds, out);
  braidCommDestroy(comm);
  return ok;
}

// The CPUs this process may run on.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// Both ranks as child processes (bench/forked_pair.h); rank 0's numbers come back.
std::optional<Numbers> MeasurePair(const char* transports) {
  braidUniqueId id;
  if (!Check(braidGetUniqueId(&id), nullptr, "braidGetUniqueId")) return std::nullopt;
  const std::optional<std::string> bytes =
      braid::bench::RunForkedPair([&](int rank) -> std::optional<std::string> {
        Numbers numbers;
        if (!MeasureForkedRank(rank, id, transports, &numbers)) return std::nullopt;
        return std::string(reinterpret_cast<const char*>(&numbers), sizeof(numbers));
      });
  if (!bytes || bytes->size() != sizeof(Numbers)) return std::nullopt;
  Numbers numbers;
  std::memcpy(&numbers, bytes->data(), sizeof(numbers));
  return numbers;
}

// float32 sum, result bytes per second; best of several passes.
double MeasureReduce(size_t bytes) {
  const size_t count = bytes / 4;
  std::vector<float> a(count, 1.0f), b(count, 2.0f);
  const int passes = static_cast<int>(std::max<size_t>(4, (size_t{1} << 30) / bytes));
  double best = 1e9;
  for (int round = 0; round < 5; ++round) {
    auto start = Clock::now();
    for (int p = 0; p < passes; ++p) {
      braid::kernels::ReduceInto(braid::DataType::kFloat32, braid::ReduceOp::kSum, a.data(),
                                 a.data(), b.data(), count);
    }
    best = std::min(best, Seconds(start) / passes);
  }
  return static_cast<double>(bytes) / best / 1e9;
}

// `value` to 3 significant digits: what the measurements resolve (rounds differ by more).
double Significant(double value) {
  if (value == 0 || !std::isfinite(value)) return value;
  const double scale = std::pow(10.0, 2 - static_cast<int>(std::floor(std::log10(std::fabs(value)))));
  return std::round(value * scale) / scale;
}

// The step latency that makes the model's price of the measured call (an 8-byte allreduce by
// recursive doubling on 2 ranks) equal `step_us`, under `link` otherwise. The price is linear in
// the latency; solved from two evaluations so that the cost function stays the one authority.
double LatencyFromStep(LinkModel link, double step_us) {
  using namespace braid::algorithms;
  const Algorithm* rd = FindAlgorithm(Collective::kAllReduce, "rd");
  if (rd == nullptr || rd->cost == nullptr) return step_us;
  link.latency_us = 0;
  const double at_zero = rd->cost(link, 2, 8);
  link.latency_us = 1;
  const double slope = rd->cost(link, 2, 8) - at_zero;
  if (slope <= 0) return step_us;
  return std::max(0.0, (step_us - at_zero) / slope);
}

// Writes `text` to `path` whole or not at all (a temporary file renamed over it, so a process
// reading it meanwhile sees the old file or the new one), creating missing parent folders.
bool WriteFile(const std::string& path, const std::string& text) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string folder = path.substr(0, slash);
    if (mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "calibrate: cannot create %s: %s\n", folder.c_str(), std::strerror(errno));
      return false;
    }
  }
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) {
    std::fprintf(stderr, "calibrate: cannot write %s: %s\n", temporary.c_str(), std::strerror(errno));
    return false;
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "calibrate: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

// `calibrate --picks`: what the selector picks under this process's calibration, per collective,
// rank count and size (the "when is it picked" column of docs/ALGORITHMS.md).
void PrintPicks() {
  using namespace braid::algorithms;
  const Calibration& calibration = ProcessCalibration();
  std::printf("# calibration: %s (checksum %s)\n", calibration.source().c_str(),
              calibration.Fingerprint().c_str());
  const AlgorithmPolicy none;
  struct Model {
    const char* transport;
    bool oversubscribed;
  };
  for (const Model& model : {Model{"shm", false}, Model{"shm", true}, Model{"tcp", true}}) {
    const char* transport = model.transport;
    // The header's model: 4 ranks on the development hosts' 2 CPUs where ranks share cores.
    const LinkModel link = calibration.Model(transport, model.oversubscribed, 2.0);
    std::printf("# %s%s: latency %.1f us, bandwidth %.2f GB/s, reduce %.1f GB/s\n", transport,
                model.oversubscribed ? " (ranks share cores: n ranks on 2 CPUs)" : " (a core per rank)",
                link.latency_us, link.bandwidth_gbps, link.reduce_gbps);
    for (Collective kind : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                            Collective::kAllGather, Collective::kReduceScatter,
                            Collective::kAllToAll, Collective::kGather, Collective::kScatter}) {
      std::printf("%-13s n\\bytes", CollectiveName(kind));
      for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 4) {
        std::printf(" %8s", (bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "M"
                             : bytes >= 1024   ? std::to_string(bytes >> 10) + "K"
                                               : std::to_string(bytes)).c_str());
      }
      std::printf("\n");
      for (int n : {2, 3, 4, 5, 8, 16, 64}) {
        // Ranks sharing cores: the development hosts' 2 CPUs (the direct allreduce's price
        // depends on how many ranks take turns on each).
        const LinkModel link_n =
            model.oversubscribed ? calibration.Model(transport, true, n / 2.0) : link;
        std::printf("%-13s %7d", "", n);
        for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 4) {
          CollectiveArgs args;
          args.kind = kind;
          args.type = braid::DataType::kUint8;
          // MessageBytes multiplies per-rank counts by n for the gathering collectives.
          const bool per_rank = kind == Collective::kAllGather || kind == Collective::kReduceScatter ||
                                kind == Collective::kAllToAll || kind == Collective::kGather ||
                                kind == Collective::kScatter;
          args.count = per_rank ? std::max<size_t>(1, bytes / n) : bytes;
          auto chosen = SelectAlgorithm(args, n, none, link_n);
          std::printf(" %8s", chosen.ok() ? chosen.value()->name : "-");
        }
        std::printf("\n");
      }
    }
    std::printf("\n");
  }
}

std::string Today() {
  char text[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc;
  if (gmtime_r(&now, &utc) != nullptr) std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", &utc);
  return text;
}


// Prints the calibration file's `text` and, with `write`, writes it to `path` once it reads back.
int Finish(const std::string& text, bool write, const std::string& path) {
  std::printf("\n%s", text.c_str());
  if (!write) {
    std::printf("\n# not written: --write saves it to %s\n",
                braid::algorithms::CalibrationPath().empty()
                    ? "PATH (give one: no default location)"
                    : braid::algorithms::CalibrationPath().c_str());
    return 0;
  }
  // Check what is written reads back before it replaces anything.
  auto parsed = braid::algorithms::Calibration::Parse(text, path);
  if (!parsed.ok()) {
    std::fprintf(stderr, "calibrate: internal error, the file would not parse: %s\n",
                 parsed.status().message().c_str());
    return 1;
  }
  if (!WriteFile(path, text)) return 1;
  std::printf("\n# wrote %s (checksum %s)\n", path.c_str(), parsed.value().Fingerprint().c_str());
  return 0;
}

// --- calibrate --across-hosts: the network between hosts, for the tcp entry ---------------------

// Where a rank runs, as braid's communicators tell hosts apart (rendezvous::HostKey: host name,
// boot id, network namespace) and count CPUs (rendezvous::BusiestHost: per machine, host name and
// boot id, all its online CPUs). Read here because bench sees braid through its C API only.
struct Placement {
  char machine[320] = "";  // host name and boot id
  char net_ns[64] = "";
  int cpus = 0;
  cpu_set_t allowed;  // the CPUs this rank may run on (braidrun binds ranks)
};

Placement ThisPlacement() {
  Placement placement;
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  std::snprintf(placement.machine, sizeof(placement.machine), "%s/%s", host, boot.c_str());
  const ssize_t n = readlink("/proc/self/ns/net", placement.net_ns, sizeof(placement.net_ns) - 1);
  if (n > 0) placement.net_ns[n] = '\0';
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  placement.cpus = cpus > 0 ? static_cast<int>(cpus) : 1;
  CPU_ZERO(&placement.allowed);
  if (sched_getaffinity(0, sizeof(placement.allowed), &placement.allowed) != 0) {
    for (int cpu = 0; cpu < placement.cpus && cpu < CPU_SETSIZE; ++cpu) {
      CPU_SET(cpu, &placement.allowed);
    }
  }
  return placement;
}

// Whether ranks placed at `a` and `b` may have to take turns on a CPU: the same machine (hosts
// that are namespaces or containers of one) and CPU sets that meet.
bool ShareCpus(const Placement& a, const Placement& b) {
  if (std::strcmp(a.machine, b.machine) != 0) return false;
  cpu_set_t both;
  CPU_AND(&both, &a.allowed, &b.allowed);
  return CPU_COUNT(&both) > 0;
}

// The job's shape as the selector sees it (LinkModel::hosts, ranks_per_host, ranks_per_cpu).
struct JobShape {
  std::vector<int> host_of;  // per rank
  int hosts = 0;
  int ranks_per_host = 0;    // the most on any host
  double ranks_per_cpu = 1;  // on the busiest machine, when it runs more ranks than CPUs
  bool oversubscribed = false;
};

JobShape ShapeOf(const std::vector<Placement>& all) {
  JobShape shape;
  std::map<std::string, int> host_index;
  std::map<std::string, std::pair<int, int>> per_machine;  // ranks, CPUs
  std::vector<int> per_host;
  for (const Placement& p : all) {
    const std::string key = std::string(p.machine) + "/" + p.net_ns;
    auto [it, added] = host_index.emplace(key, static_cast<int>(host_index.size()));
    if (added) per_host.push_back(0);
    shape.host_of.push_back(it->second);
    ++per_host[static_cast<size_t>(it->second)];
    auto& machine = per_machine[p.machine];
    ++machine.first;
    machine.second = p.cpus;
  }
  shape.hosts = static_cast<int>(per_host.size());
  for (int count : per_host) shape.ranks_per_host = std::max(shape.ranks_per_host, count);
  for (const auto& [name, load] : per_machine) {
    const double ratio = static_cast<double>(load.first) / std::max(1, load.second);
    if (ratio > 1.0) {
      shape.oversubscribed = true;
      shape.ranks_per_cpu = std::max(shape.ranks_per_cpu, ratio);
    }
  }
  return shape;
}

// Best time (us) of one 8-byte allreduce on `comm`, whose allreduce is forced to one algorithm.
bool TimeSmallAllReduce(braidComm_t comm, const Rounds& rounds, double* best_us) {
  float values[2] = {1.0f, 2.0f};
  double best = 1e9;
  for (int round = 0; round < rounds.small; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < rounds.round_trips; ++i) {
      if (!Check(braidAllReduce(values, values, 2, braidFloat32, braidMax, comm, nullptr), comm,
                 "allreduce")) {
        return false;
      }
    }
    if (round > 0) best = std::min(best, Seconds(start) / rounds.round_trips);
  }
  *best_us = best * 1e6;
  return true;
}

// The fan-out price that makes the model's price of the measured direct allreduce (8 bytes, the
// whole job) equal `direct_us`, under `link` otherwise (linear in it; two evaluations, so that
// the cost function stays the one authority, as LatencyFromStep).
double FanOutFromDirect(LinkModel link, int n, double direct_us) {
  using namespace braid::algorithms;
  const Algorithm* direct = FindAlgorithm(Collective::kAllReduce, "direct");
  if (direct == nullptr || direct->cost == nullptr) return 0;
  link.fan_out_us = 0;
  const double at_zero = direct->cost(link, n, 8);
  link.fan_out_us = 1;
  const double slope = direct->cost(link, n, 8) - at_zero;
  if (slope <= 0) return 0;
  return std::max(0.0, (direct_us - at_zero) / slope);
}

// calibrate --across-hosts: every rank of a job that braidrun started on two or more hosts runs
// it. Rank 0 and the lowest rank on another host measure the link between them (as the one-host
// mode does, fewer rounds: a shaped link's rate is steady); then the whole job times an 8-byte
// direct allreduce, from which the network's per-message fan-out price is solved (where each rank
// has two or more peers on other hosts). Rank 0 prints the calibration and, with --write, writes
// it: the tcp entry's step latency, bandwidth and fan-out as measured here, every other entry as
// the file at that path states it (the one-host calibrate's shm numbers) or built in.
int AcrossHosts(bool write, const std::string& path) {
  using braid::algorithms::Calibration;
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.algo = "allreduce:direct";  // the fan-out measurement, over the whole job
  config.shmSingleCopyBytes = 0;
  braidComm_t world = nullptr;
  if (!Check(braidCommInitEnv(&world, &config), nullptr,
             "braidCommInitEnv (--across-hosts runs under braidrun, one job across hosts)")) {
    return 1;
  }
  int rank = 0, size = 0;
  braidCommUserRank(world, &rank);
  braidCommCount(world, &size);
  const Placement mine = ThisPlacement();
  std::vector<Placement> all(static_cast<size_t>(size));
  if (!Check(braidAllGather(&mine, all.data(), sizeof(Placement), braidUint8, world, nullptr),
             world, "allgather of the ranks' hosts")) {
    return 1;
  }
  const JobShape shape = ShapeOf(all);
  if (shape.hosts < 2) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "calibrate --across-hosts: all %d ranks run on one host (one host name, boot id "
                   "and network namespace), so there is no link between hosts to measure: start "
                   "the job on two hosts, e.g. braidrun --nnodes 2 --node-rank K --master-addr "
                   "HOST0 -- calibrate --across-hosts\n",
                   size);
    }
    braidCommDestroy(world);
    return 2;
  }
  // The pair: rank 0 and the lowest rank on another host, preferring one that runs on other
  // CPUs (where hosts share a machine, two ranks bound to one CPU would measure their turns on
  // it, not the link).
  int peer = -1;
  for (bool any_cpus : {false, true}) {
    for (int r = 1; r < size && peer < 0; ++r) {
      if (shape.host_of[static_cast<size_t>(r)] != shape.host_of[0] &&
          (any_cpus || !ShareCpus(all[0], all[static_cast<size_t>(r)]))) {
        peer = r;
      }
    }
  }
  braidConfig_t pair_config = BRAID_CONFIG_INITIALIZER;
  pair_config.algo = "allreduce:rd";
  pair_config.shmSingleCopyBytes = 0;
  braidComm_t pair = nullptr;
  const bool in_pair = rank == 0 || rank == peer;
  if (!Check(braidCommSplit(world, in_pair ? 0 : BRAID_SPLIT_NOCOLOR, rank, &pair, &pair_config),
             world, "braidCommSplit (the pair across hosts)")) {
    return 1;
  }
  Numbers numbers;
  bool ok = true;
  if (in_pair) {
    ok = MeasureLinks(pair, rank == 0 ? 0 : 1, kAcrossHostsRounds, &numbers);
    braidCommDestroy(pair);
  }
  // The other ranks wait here while the pair measures; then every rank learns whether all went
  // well, so that all of them take the same next step.
  int all_ok = ok ? 1 : 0;
  ok = Check(braidAllReduce(&all_ok, &all_ok, 1, braidInt32, braidMin, world, nullptr), world,
             "agreeing on the pair's measurement") &&
       all_ok == 1;
  const int remote_peers = size - shape.ranks_per_host;
  double direct_us = 0;
  const bool fan_out_measured = ok && remote_peers >= 2;
  if (fan_out_measured) ok = TimeSmallAllReduce(world, kAcrossHostsRounds, &direct_us);
  braidCommDestroy(world);
  if (!ok) return 1;
  if (rank != 0) return 0;

  // What the file at `path` states already (the one-host measurement's shm numbers) is kept.
  CalibrationValues values;
  std::string kept = "built-in values for every other entry";
  if (write && access(path.c_str(), F_OK) == 0) {
    auto existing = Calibration::Load(path);
    if (!existing.ok()) {
      std::fprintf(stderr, "calibrate: %s; not replacing it (fix or remove it first)\n",
                   existing.status().message().c_str());
      return 1;
    }
    values = existing.value().values();
    kept = "every other entry as " + path + " stated it";
  }
  auto& tcp = values["tcp"];
  tcp["bandwidth_gbps"] = Significant(numbers.exchange_gbps);
  {
    LinkModel link = Calibration::BuiltIn().Model("tcp", /*oversubscribed=*/false, 1.0);
    link.bandwidth_gbps = tcp["bandwidth_gbps"];
    // A step between hosts is the network's whether or not ranks share cores.
    tcp["latency_us_core_per_rank"] = Significant(LatencyFromStep(link, numbers.step_latency_us));
    tcp["latency_us"] = tcp["latency_us_core_per_rank"];
  }
  if (fan_out_measured) {
    auto parsed = Calibration::Parse(braid::algorithms::FormatCalibration(values, ""), "measured");
    if (!parsed.ok()) {
      std::fprintf(stderr, "calibrate: internal error: %s\n", parsed.status().message().c_str());
      return 1;
    }
    LinkModel link =
        parsed.value().Model("tcp", shape.oversubscribed, shape.ranks_per_cpu);
    link.hosts = shape.hosts;
    link.ranks_per_host = shape.ranks_per_host;
    tcp["fan_out_us"] = Significant(FanOutFromDirect(link, size, direct_us));
  }
  std::printf("# braid calibration across hosts: rank 0 (%s) and rank %d (%s), %d ranks on %d hosts\n",
              all[0].machine, peer, all[static_cast<size_t>(peer)].machine, size, shape.hosts);
  std::printf("%-10s %12s %12s %12s %12s %12s %12s\n", "link", "step_us", "pingpong_us",
              "exchange_us", "exchange_GBs", "oneway_GBs", "direct_us");
  std::printf("%-10s %12.2f %12.2f %12.2f %12.4f %12.4f %12s\n", "tcp", numbers.step_latency_us,
              numbers.latency_us, numbers.exchange_latency_us, numbers.exchange_gbps,
              numbers.oneway_gbps,
              fan_out_measured ? std::to_string(direct_us).c_str() : "-");
  if (!fan_out_measured) {
    std::printf("# tcp.fan_out_us not measured: each rank has %d peer(s) on other hosts; run two "
                "ranks or more per host (braidrun -n 2) to measure it\n",
                remote_peers);
  }
  const std::string text = braid::algorithms::FormatCalibration(
      values, "braid calibration: tcp measured across hosts by bench/calibrate --across-hosts, " +
                  Today() + ",\nbetween rank 0 and rank " + std::to_string(peer) + " of " +
                  std::to_string(size) + " on " + std::to_string(shape.hosts) +
                  " hosts (the step latency solved from the model's price of\none measured step, "
                  "the fan-out price from that of an 8-byte direct allreduce of the job);\n" +
                  kept + ".");
  return Finish(text, write, path);
}

int Usage() {
  std::fprintf(stderr,
               "usage: calibrate [--write [PATH]]   measure; with --write, save the calibration\n"
               "                                     (default %s)\n"
               "       calibrate --across-hosts [--write [PATH]]\n"
               "                                     under braidrun on two hosts or more: measure\n"
               "                                     tcp between them (the file's other entries kept)\n"
               "       calibrate --picks             the selector's picks under the calibration\n",
               braid::algorithms::CalibrationPath().empty()
                   ? "none: BRAID_CALIBRATION=none or no HOME"
                   : braid::algorithms::CalibrationPath().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool write = false, across_hosts = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--picks") == 0 && argc == 2) {
      PrintPicks();
      return 0;
    } else if (std::strcmp(argv[i], "--write") == 0) {
      write = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') path = argv[++i];
    } else if (std::strncmp(argv[i], "--write=", 8) == 0) {
      write = true;
      path = argv[i] + 8;
    } else if (std::strcmp(argv[i], "--across-hosts") == 0) {
      across_hosts = true;
    } else {
      return Usage();
    }
  }
  if (write && path.empty()) path = braid::algorithms::CalibrationPath();
  if (write && path.empty()) {
    std::fprintf(stderr, "calibrate: no default location (BRAID_CALIBRATION=none, or no HOME): "
                         "give --write PATH\n");
    return 2;
  }
  if (across_hosts) return AcrossHosts(write, path);

  const std::vector<int> cpus = AllowedCpus();
  const bool core_per_rank = cpus.size() >= 2;
  // The numbers the measurement does not give are the built-in ones, in the file as in the
  // latencies solved here (the file leaves them commented out, so they follow the built-in table).
  const Calibration base = Calibration::BuiltIn();
  CalibrationValues measured;
  std::printf("# braid calibration: 2 ranks as processes, %zu CPUs allowed%s\n", cpus.size(),
              core_per_rank ? "" : " (fewer than 2: no step latency, the ranks share a CPU)");
  std::printf("%-10s %12s %12s %12s %12s %12s\n", "transport", "step_us", "pingpong_us",
              "exchange_us", "exchange_GBs", "oneway_GBs");
  for (const char* transport : {"shm", "tcp"}) {
    const std::optional<Numbers> numbers = MeasurePair(transport);
    if (!numbers) return 1;
    std::printf("%-10s %12.2f %12.2f %12.2f %12.2f %12.2f\n", transport, numbers->step_latency_us,
                numbers->latency_us, numbers->exchange_latency_us, numbers->exchange_gbps,
                numbers->oneway_gbps);
    auto& values = measured[transport];
    values["bandwidth_gbps"] = Significant(numbers->exchange_gbps);
    if (core_per_rank) {
      LinkModel link = base.Model(transport, /*oversubscribed=*/false, 1.0);
      link.bandwidth_gbps = values["bandwidth_gbps"];
      values["latency_us_core_per_rank"] =
          Significant(LatencyFromStep(link, numbers->step_latency_us));
    }
  }
  for (bool shared_core : {false, true}) {
    bool single_copy_ran = false;
    const braid::bench::SingleCopyMeasurement single_copy =
        braid::bench::MeasureSingleCopy(shared_core, &single_copy_ran);
    if (!single_copy_ran) return 1;
    const char* where = shared_core ? "ranks sharing a CPU" : "a CPU per rank";
    if (!single_copy.refused.empty()) {
      std::printf("shm single copy: refused here (%s): the ring at every size\n",
                  single_copy.refused.c_str());
    } else {
      std::printf("%-10s %12s %12s %12s   (2 processes, %s, exchanging; GB/s per direction, "
                  "best rounds; speedup: median of paired rounds)\n",
                  "message", "ring_GBs", "single_GBs", "speedup", where);
      for (const braid::bench::SingleCopyPoint& point : single_copy.points) {
        std::printf("%-10zu %12.2f %12.2f %12.2f\n", point.bytes, point.ring_gbps,
                    point.single_gbps, point.paired_speedup);
      }
      std::printf("shm single copy, %s: %s\n", where,
                  single_copy.min_bytes == 0
                      ? "the ring at every size (single copy never 5% faster in the median pair)"
                      : ("from " + std::to_string(single_copy.min_bytes) + " bytes").c_str());
    }
    const double min_bytes = static_cast<double>(single_copy.min_bytes);
    if (shared_core) {
      measured["shm"]["single_copy_bytes_shared_cores"] = min_bytes;
    } else {
      measured["shm"]["single_copy_bytes"] = min_bytes;
      measured["shm"]["single_copy_gbps"] = Significant(single_copy.single_gbps_16m);
    }
    if (!single_copy.refused.empty()) {  // the same answer either way
      measured["shm"]["single_copy_bytes_shared_cores"] = 0;
      break;
    }
  }

  const double reduce_chunk = MeasureReduce(512 * 1024);
  const double reduce_large = MeasureReduce(size_t{64} << 20);
  std::printf("reduce_gbps %.2f (float32 sum, 512 KiB), memory_reduce_gbps %.2f (64 MiB)\n",
              reduce_chunk, reduce_large);
  for (auto& entry : measured) {
    entry.second["reduce_gbps"] = Significant(reduce_chunk);
    entry.second["memory_reduce_gbps"] = Significant(reduce_large);
  }

  // A busy machine measures its load, not braid: say so where the numbers go.
  std::string load_note;
  double load[1] = {0};
  if (getloadavg(load, 1) == 1 && load[0] > static_cast<double>(cpus.size())) {
    char text[160];
    std::snprintf(text, sizeof(text),
                  "\nMeasured under load (%.1f on %zu CPUs): the latencies may be far too high.",
                  load[0], cpus.size());
    load_note = text;
    std::printf("# warning:%s\n", text + 1);
  }
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  const std::string text = braid::algorithms::FormatCalibration(
      measured, "braid calibration, written by bench/calibrate on " + std::string(host) + ", " +
                    Today() + ", " + std::to_string(cpus.size()) +
                    " CPUs allowed.\nEach number the best of many short rounds, 2 ranks as "
                    "processes; the latency is\nsolved from the model's price of one measured "
                    "step (bench/calibrate.cc)." + load_note);
  return Finish(text, write, path);
}
