// calibrate: measures the three numbers of braid's cost model (algorithms/algorithm.h LinkModel)
// on this host, so the selector's defaults come from measurement rather than guesses.
//
//   bazel build //bench:calibrate && bazel-bin/bench/calibrate
//   bazel-bin/bench/calibrate --picks     # what the selector picks under each measured model
//
// - latency_us: the time of one algorithm step: an 8-byte allreduce forced to recursive doubling
//   on 2 ranks, which is one exchange and a 2-element reduction, over the default transport (TCP
//   loopback here): posting, the io thread, the wait. Also printed for reference: the one-way
//   latency of a braidSend/braidRecv ping-pong (the waiter sleeps longer, so wakes up slower) and
//   of a send+recv group.
// - bandwidth_gbps: the per-direction rate of 16 MiB messages when both ranks send to each other
//   at once, as every rank does in every collective; the one-way rate is printed for reference.
// - reduce_gbps: kernels::ReduceInto on float32 sum, bytes of result per second, on a chunk-sized
//   (512 KiB, cache-resident, as the pipelined algorithms reduce) and a large (64 MiB) buffer.
//
// Ranks are two forked processes, as braidrun and the *_perf programs run them.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/selector.h"
#include "bindings/c/braid.h"
#include "core/base/datatype.h"
#include "kernels/cpu/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;

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

// Runs the transport measurements as `rank` of 2; rank 0 fills `out`.
bool MeasureLinks(int rank, const braidUniqueId& id, Numbers* out) {
  braidComm_t comm = nullptr;
  if (!Check(braidCommInitRank(&comm, 2, id, rank), nullptr, "braidCommInitRank")) return false;
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
  // between the two ranks plus a 2-element reduction (main() sets BRAID_ALGO before any init).
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

  // One-way streaming: rank 0 sends kMessages large messages, rank 1 acknowledges the last.
  const size_t kBytes = size_t{16} << 20;
  const int kMessages = 4;
  std::vector<char> big(kBytes, 1), other(kBytes, 2);
  double best_oneway = 1e9;
  for (int round = 0; round < kRounds / 2 && ok; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < kMessages && ok; ++i) {
      ok = rank == 0 ? Check(braidSend(big.data(), kBytes, braidUint8, peer, comm, nullptr), comm, "send")
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
  braidCommDestroy(comm);
  return ok;
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

// `calibrate --picks`: what the selector picks under each measured model, per collective, rank
// count and size (the "when is it picked" column of docs/ALGORITHMS.md).
void PrintPicks() {
  using namespace braid::algorithms;
  const AlgorithmPolicy none;
  struct Model {
    const char* transport;
    bool oversubscribed;
  };
  for (const Model& model : {Model{"shm", false}, Model{"shm", true}, Model{"tcp", true}}) {
    const char* transport = model.transport;
    const LinkModel link = DefaultLinkModel(transport, model.oversubscribed);
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
            model.oversubscribed ? DefaultLinkModel(transport, true, n / 2.0) : link;
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

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--picks") == 0) {
    PrintPicks();
    return 0;
  }
  // The step measurement needs recursive doubling; the environment is read at the first init.
  setenv("BRAID_ALGO", "allreduce:rd", 1);
  braidUniqueId id;
  if (!Check(braidGetUniqueId(&id), nullptr, "braidGetUniqueId")) return 1;
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    Numbers ignored;
    _exit(MeasureLinks(1, id, &ignored) ? 0 : 1);
  }
  Numbers links;
  bool ok = MeasureLinks(0, id, &links);
  int status = 0;
  waitpid(child, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;

  const double reduce_chunk = MeasureReduce(512 * 1024);
  const double reduce_large = MeasureReduce(size_t{64} << 20);
  std::printf("# braid calibration (2 ranks as processes, default transport)\n");
  std::printf("latency_us          %8.2f   one-way, 8-byte ping-pong / 2\n", links.latency_us);
  std::printf("exchange_latency_us %8.2f   8-byte send+recv group, both ranks at once\n",
              links.exchange_latency_us);
  std::printf("step_latency_us     %8.2f   8-byte allreduce forced to rd: one exchange step\n",
              links.step_latency_us);
  std::printf("bandwidth_gbps      %8.2f   one-way stream of 16 MiB messages\n", links.oneway_gbps);
  std::printf("exchange_gbps       %8.2f   per direction, both ranks sending at once\n",
              links.exchange_gbps);
  std::printf("reduce_gbps         %8.2f   float32 sum, 512 KiB (cache-resident chunk)\n",
              reduce_chunk);
  std::printf("reduce_large_gbps   %8.2f   float32 sum, 64 MiB\n", reduce_large);
  // The model's alpha is an algorithm step; its beta the per-direction rate while every rank
  // sends (as in every collective); its gamma the cache-resident reduction of a chunk.
  std::printf("LinkModel{latency_us = %.1f, bandwidth_gbps = %.2f, reduce_gbps = %.1f}\n",
              links.step_latency_us, links.exchange_gbps, reduce_chunk);
  return 0;
}
