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

// Runs the transport measurements as `rank` of 2 over `transports`; rank 0 fills `out`.
bool MeasureLinks(int rank, const braidUniqueId& id, const char* transports, Numbers* out) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.transports = transports;
  config.algo = "allreduce:rd";  // the step measurement: one exchange, whatever the model says
  config.shmSingleCopyBytes = 0;  // the ring's rate, whatever the file in use chose
  braidComm_t comm = nullptr;
  if (!Check(braidCommInitRankConfig(&comm, 2, id, rank, &config), nullptr, "braidCommInitRank")) {
    return false;
  }
  const int peer = 1 - rank;
  bool ok = true;

  // Every number is the best of many short rounds (the first round warms up): on a 2-core machine
  // shared with other work, the quietest round is the one that shows what braid itself costs.
  char small[8] = {0}, small_in[8] = {0};
  const int kRounds = 40;
  const int kRoundTrips = 200;
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
    const int kMessages = 4;
    std::vector<char> big(kBytes, 1), other(kBytes, 2);
    double best_oneway = 1e9;
    for (int round = 0; round < kRounds / 2 && ok; ++round) {
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
    for (int round = 0; round < kRounds / 2 && ok; ++round) {
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
        if (!MeasureLinks(rank, id, transports, &numbers)) return std::nullopt;
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

int Usage() {
  std::fprintf(stderr,
               "usage: calibrate [--write [PATH]]   measure; with --write, save the calibration\n"
               "                                     (default %s)\n"
               "       calibrate --picks             the selector's picks under the calibration\n",
               braid::algorithms::CalibrationPath().empty()
                   ? "none: BRAID_CALIBRATION=none or no HOME"
                   : braid::algorithms::CalibrationPath().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool write = false;
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
  std::printf("\n%s", text.c_str());
  if (!write) {
    std::printf("\n# not written: --write saves it to %s\n",
                braid::algorithms::CalibrationPath().empty()
                    ? "PATH (give one: no default location)"
                    : braid::algorithms::CalibrationPath().c_str());
    return 0;
  }
  // Check what is written reads back before it replaces anything.
  auto parsed = Calibration::Parse(text, path);
  if (!parsed.ok()) {
    std::fprintf(stderr, "calibrate: internal error, the file would not parse: %s\n",
                 parsed.status().message().c_str());
    return 1;
  }
  if (!WriteFile(path, text)) return 1;
  std::printf("\n# wrote %s (checksum %s)\n", path.c_str(), parsed.value().Fingerprint().c_str());
  return 0;
}
