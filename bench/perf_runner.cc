#include "bench/perf_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "bench/perf_data.h"
#include "bench/perf_flags.h"
#include "bench/perf_json.h"
#include "bench/perf_printf.h"
#include "bench/perf_table.h"
#include "bench/perf_types.h"

namespace braid::bench {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<char, FreeDeleter>;

HostBuffer AllocateHost(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(bytes, 64)) != 0) return HostBuffer();
  std::memset(p, 0, std::max<size_t>(bytes, 64));  // touch every page before any timing
  return HostBuffer(static_cast<char*>(p));
}

std::string Now() {
  char buf[64];
  const time_t now = time(nullptr);
  struct tm tm_now;
  localtime_r(&now, &tm_now);
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm_now);
  return buf;
}

// One program run on one rank. Errors: every step that can fail returns false after printing
// what failed (a braid call: its braidGetLastError); the caller stops there, writes the rows so
// far to the JSON report and exits with status 3, and the destructor aborts the communicator.
class Runner {
 public:
  Runner(const PerfOptions& options, const Collective& collective, const char* program, int argc,
         char** argv)
      : opt_(options), coll_(collective), program_(program) {
    json_.collective = coll_.Name();
    json_.options = options;
    json_.start_time = Now();
    for (int i = 0; i < argc; ++i) json_.args.emplace_back(argv[i]);
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      if (KeepEnvEntry(*e)) json_.env.emplace_back(*e);
    }
  }

  ~Runner() {
    if (comm_ != nullptr) braidCommAbort(comm_);  // only reached on failure paths
  }

  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // The sweep. True with *exit_status 0 (all correct), 1 (wrong elements) or 2 (a root outside
  // the communicator); false after a failure, already reported.
  [[nodiscard]] bool Main(int* exit_status) {
    if (!Init()) return false;
    if (coll_.Rooted() && opt_.root >= nranks_) {
      if (rank_ == 0) {
        std::fprintf(stderr, "%s: invalid value '%d' for -r: the root must be < %d ranks\n",
                     program_, opt_.root, nranks_);
      }
      Destroy();
      *exit_status = 2;
      return true;
    }
    OpenJson();
    if (!AllocateBuffers() || !PrintPreamble() || !PrintDevices()) return false;
    if (rank_ == 0) std::printf("#\n%s", FormatTableHeader().c_str());
    Flush();

    const std::vector<braidRedOp_t> ops =
        coll_.Reduces() ? opt_.ops : std::vector<braidRedOp_t>{braidSum};
    for (braidDataType_t type : opt_.types) {
      for (braidRedOp_t op : ops) {
        if (!TimeTest(type, op)) return false;
      }
    }

    const double avg_busbw = bw_count_ > 0 ? bw_sum_ / bw_count_ : 0;
    if (rank_ == 0) {
      std::printf("# %-20s : %d %s\n", "Out of bounds values", errors_, errors_ ? "FAILED" : "OK");
      std::printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg_busbw, "");
      std::printf("#\n# Collective test concluded: %s\n#\n\n", coll_.Name());
    }
    Flush();
    json_.avg_busbw = avg_busbw;
    WriteJson();
    Destroy();
    *exit_status = errors_ ? 1 : 0;
    return true;
  }

  // After a failure: the rows so far and the error, if -J asked for a report.
  void WriteJsonAfterFailure() {
    if (json_file_ == nullptr) return;
    if (!last_error_.empty()) json_.messages.push_back(last_error_);
    WriteJson();
  }

 private:
  // True if `result` is braidSuccess; otherwise reports the failed call and returns false.
  [[nodiscard]] bool Check(braidResult_t result, const char* what) {
    if (result == braidSuccess) return true;
    last_error_ = Printf("rank %d: %s failed: %s: %s", rank_, what, braidGetErrorString(result),
                         braidGetLastError(comm_));
    std::fprintf(stderr, "%s: %s\n", program_, last_error_.c_str());
    std::fflush(stderr);
    return false;
  }

  [[nodiscard]] bool Init() {
    const char* env_rank = std::getenv("RANK");
    if (env_rank == nullptr) env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    braidResult_t result = braidCommInitEnv(&comm_, nullptr);
    if (result != braidSuccess) {
      std::fprintf(stderr, "%s: rank %s: braidCommInitEnv failed: %s: %s\n", program_,
                   env_rank ? env_rank : "?", braidGetErrorString(result),
                   braidGetLastError(nullptr));
      comm_ = nullptr;
      return false;
    }
    if (!Check(braidCommUserRank(comm_, &rank_), "braidCommUserRank") ||
        !Check(braidCommCount(comm_, &nranks_), "braidCommCount")) {
      return false;
    }
    json_.nranks = nranks_;
    return true;
  }

  void Destroy() {
    if (comm_ == nullptr) return;
    braidComm_t comm = comm_;
    comm_ = nullptr;
    braidResult_t result = braidCommFinalize(comm);
    if (result == braidSuccess) result = braidCommDestroy(comm);
    if (result != braidSuccess) {
      std::fprintf(stderr, "%s: rank %d: closing the communicator failed: %s: %s\n", program_,
                   rank_, braidGetErrorString(result), braidGetLastError(comm));
    }
  }

  void Flush() {
    if (rank_ == 0) std::fflush(stdout);
  }

  // Rank 0 opens the file first (nccl-tests prints where it writes before anything else).
  void OpenJson() {
    if (rank_ != 0 || opt_.json_path.empty()) return;
    std::string opened;
    json_file_ = OpenJsonFile(opt_.json_path, &opened);
    if (json_file_ == nullptr) {
      std::printf("# skipping json output; %s not accessible\n", opt_.json_path.c_str());
    } else {
      std::printf("# Writing JSON output to %s\n", opened.c_str());
    }
  }

  void WriteJson() {
    if (json_file_ == nullptr) return;
    json_.end_time = Now();
    json_.errors = errors_;
    const std::string text = FormatJson(json_);
    std::fwrite(text.data(), 1, text.size(), json_file_);
    std::fclose(json_file_);
    json_file_ = nullptr;
  }

  // Bytes the send / recv buffers need for every type of the sweep at max_bytes, in place too.
  [[nodiscard]] bool AllocateBuffers() {
    size_t send = 0, recv = 0;
    for (braidDataType_t type : opt_.types) {
      const size_t elem = TypeSize(type);
      size_t s_bytes, r_bytes;
      BufferBytes(coll_.Sizes(opt_.max_bytes / elem, elem, nranks_), elem, rank_, &s_bytes,
                  &r_bytes);
      send = std::max(send, s_bytes);
      recv = std::max(recv, r_bytes);
    }
    send_ = AllocateHost(send);
    recv_ = AllocateHost(recv);
    expected_ = AllocateHost(recv);
    if (!send_ || !recv_ || !expected_) {
      last_error_ = Printf("rank %d: cannot allocate %zu + 2 x %zu bytes of host memory", rank_,
                           send, recv);
      std::fprintf(stderr, "%s: %s\n", program_, last_error_.c_str());
      return false;
    }
    return true;
  }

  [[nodiscard]] bool PrintPreamble() {
    int version = 0;
    if (!Check(braidGetVersion(&version), "braidGetVersion")) return false;
    json_.braid_version = version;
    if (rank_ != 0) return true;
    // nccl-tests' first line, naming braid's header and library versions instead of NCCL's.
    std::printf("# nccl-tests version 2.19.6 braid-headers=%d braid-library=%d\n",
                BRAID_VERSION_CODE, version);
    std::printf("# Collective test starting: %s\n", coll_.Name());
    const bool factor = opt_.step_factor > 1;
    std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
                "iters: %d agg iters: %d validation: %d graph: %d unalign: %d\n",
                opt_.nthreads, opt_.ngpus, opt_.min_bytes, opt_.max_bytes,
                factor ? opt_.step_factor : opt_.step_bytes, factor ? "factor" : "bytes",
                opt_.warmup_iters, opt_.iters, opt_.agg_iters, opt_.check, 0, 0);
    if (opt_.blocking == 1) {
      std::printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
    }
    if (opt_.blocking > 1) {
      std::printf("# Blocking Enabled: wait for completion after each collective (no barrier) \n");
    }
    std::printf("#\n");
    return true;
  }

  // One line per rank, gathered to every rank with a byte-wise allreduce (each rank fills its
  // own slot, zeros elsewhere): allreduce is the one collective the bench always relies on, so
  // the header does not depend on the collective under test.
  [[nodiscard]] bool PrintDevices() {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
    if (char* dot = std::strchr(host, '.')) *dot = '\0';  // as nccl-tests: no domain
    constexpr size_t kLine = 256;
    std::vector<char> all(kLine * static_cast<size_t>(nranks_), 0);
    const int pid = static_cast<int>(getpid());
    std::snprintf(&all[kLine * static_cast<size_t>(rank_)], kLine, "%s",
                  FormatDeviceLine(rank_, pid, host).c_str());
    std::vector<int32_t> pids(static_cast<size_t>(nranks_), 0);
    pids[static_cast<size_t>(rank_)] = pid;
    if (!Check(braidAllReduce(all.data(), all.data(), all.size(), braidUint8, braidSum, comm_,
                              nullptr),
               "braidAllReduce (device lines)") ||
        !Check(braidAllReduce(pids.data(), pids.data(), pids.size(), braidInt32, braidSum, comm_,
                              nullptr),
               "braidAllReduce (pids)")) {
      return false;
    }
    if (rank_ != 0) return true;
    std::printf("# Using devices\n");
    for (int r = 0; r < nranks_; ++r) {
      char* line = &all[kLine * static_cast<size_t>(r)];
      line[kLine - 1] = '\0';
      std::printf("%s", line);
      // "#  Rank  r Group  0 Pid  p on   hostname device ..." -> hostname
      JsonDevice d{r, pids[static_cast<size_t>(r)], ""};
      if (const char* on = std::strstr(line, " on ")) {
        on += 4;
        while (*on == ' ') ++on;
        const char* end = std::strchr(on, ' ');
        d.hostname.assign(on, end ? static_cast<size_t>(end - on) : std::strlen(on));
      }
      json_.devices.push_back(d);
    }
    return true;
  }

  // braidBarrier, or a one-element allreduce where the communicator has no barrier algorithm
  // yet (the selector answers braidInvalidArgument, an older build braidInvalidUsage).
  [[nodiscard]] bool Barrier() {
    if (!barrier_missing_) {
      const braidResult_t result = braidBarrier(comm_, nullptr);
      if (result == braidSuccess) return true;
      if (result != braidInvalidUsage && result != braidInvalidArgument) {
        return Check(result, "braidBarrier");
      }
      barrier_missing_ = true;
    }
    int32_t token = 0;
    return Check(braidAllReduce(&token, &token, 1, braidInt32, braidSum, comm_, nullptr),
                 "braidAllReduce (barrier)");
  }

  // Combines this rank's seconds per iteration across ranks as -a asks.
  [[nodiscard]] bool CombineTime(double seconds, double* combined) {
    braidRedOp_t op = braidSum;
    if (opt_.average == 0 && rank_ != 0) seconds = 0;  // rank 0's time, sent to everyone
    if (opt_.average == 2) op = braidMin;
    if (opt_.average == 3) op = braidMax;
    if (!Check(braidAllReduce(&seconds, &seconds, 1, braidFloat64, op, comm_, nullptr),
               "braidAllReduce (time)")) {
      return false;
    }
    *combined = opt_.average == 1 ? seconds / nranks_ : seconds;
    return true;
  }

  RankBuffers Pointers(const CollSizes& s, braidDataType_t type, bool in_place) {
    const size_t elem = TypeSize(type);
    const size_t r = static_cast<size_t>(rank_);
    if (!in_place) return RankBuffers{send_.get(), recv_.get()};
    return RankBuffers{recv_.get() + s.send_inplace_offset * r * elem,
                       recv_.get() + s.recv_inplace_offset * r * elem};
  }

  [[nodiscard]] bool RunOnce(const CollSizes& s, braidDataType_t type, braidRedOp_t op,
                             bool in_place) {
    const RankBuffers b = Pointers(s, type, in_place);
    return Check(coll_.Run(b.send, b.recv, s, type, op, opt_.root, comm_), coll_.CallName());
  }

  // Times one half of a row (out of place or in place), checks it and prints its columns.
  [[nodiscard]] bool BenchTime(const CollSizes& s, braidDataType_t type, braidRedOp_t op,
                               bool in_place, JsonResult* result) {
    const size_t elem = TypeSize(type);
    const int checks = (in_place && !coll_.ChecksInPlace()) ? 0 : opt_.check;
    if (checks > 0) {
      PrepareRank(coll_, s, type, op, opt_.root, rank_, nranks_, 0, in_place, send_.get(),
                  recv_.get(), expected_.get());
    }
    if (!RunOnce(s, type, op, in_place) || !Barrier()) return false;

    const auto start = std::chrono::steady_clock::now();
    for (int iter = 0; iter < opt_.iters; ++iter) {
      for (int a = 0; a < opt_.agg_iters; ++a) {
        if (!RunOnce(s, type, op, in_place)) return false;
        if (opt_.blocking == 1 && !Barrier()) return false;
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double seconds = 0;
    if (!CombineTime(elapsed / (static_cast<double>(opt_.iters) * opt_.agg_iters), &seconds)) {
      return false;
    }
    const size_t bw_count = s.bw_count != 0 ? s.bw_count : s.param_count;
    const double algbw = seconds > 0 ? static_cast<double>(bw_count * elem) / 1e9 / seconds : 0;
    const double busbw = algbw * coll_.BusBandwidthFactor(nranks_);
    if (!Barrier()) return false;

    int64_t wrong = checks > 0 ? 0 : -1;
    for (int c = 0; c < checks; ++c) {
      const RankBuffers b = PrepareRank(coll_, s, type, op, opt_.root, rank_, nranks_,
                                        ++check_rep_, in_place, send_.get(), recv_.get(),
                                        expected_.get());
      if (!RunOnce(s, type, op, in_place)) return false;
      wrong = CountWrong(type, op, b.recv, expected_.get(), s.recv_count);
      if (!Check(braidAllReduce(&wrong, &wrong, 1, braidInt64, braidSum, comm_, nullptr),
                 "braidAllReduce (#wrong)")) {
        return false;
      }
      if (wrong != 0) break;
    }
    if (wrong > 0) ++errors_;
    if (rank_ == 0) std::printf("%s", FormatRowBody(seconds * 1e6, algbw, busbw, wrong).c_str());
    bw_sum_ += busbw;
    ++bw_count_;
    *result = JsonResult{seconds * 1e6, algbw, busbw, wrong};
    return true;
  }

  // Every row of one (type, op): warm-up, then each size from -b to -e.
  [[nodiscard]] bool TimeTest(braidDataType_t type, braidRedOp_t op) {
    const size_t elem = TypeSize(type);
    const char* op_name = coll_.Reduces() ? OpName(op) : "none";
    const int root = coll_.Rooted() ? opt_.root : -1;
    // Warm up at the largest and the smallest size, as nccl-tests does.
    for (size_t bytes : {opt_.max_bytes, opt_.min_bytes}) {
      const CollSizes s = coll_.Sizes(bytes / elem, elem, nranks_);
      for (int w = 0; w < opt_.warmup_iters; ++w) {
        if (!RunOnce(s, type, op, false)) return false;
      }
    }
    for (size_t bytes = opt_.min_bytes; bytes <= opt_.max_bytes;) {
      const CollSizes s = coll_.Sizes(bytes / elem, elem, nranks_);
      JsonRow row;
      row.bytes = std::max(s.send_count, s.recv_count) * elem;
      row.count = s.param_count;
      row.type = TypeName(type);
      row.redop = op_name;
      row.root = root;
      row.iterations = opt_.iters;
      if (rank_ == 0) {
        std::printf("%s", FormatRowPrefix(row.bytes, row.count, row.type.c_str(), op_name, root)
                              .c_str());
      }
      if (!BenchTime(s, type, op, false, &row.out_of_place) ||
          !BenchTime(s, type, op, true, &row.in_place)) {
        return false;
      }
      if (rank_ == 0) std::printf("\n");
      Flush();
      json_.rows.push_back(row);
      if (opt_.step_factor > 1) {
        if (bytes > SIZE_MAX / opt_.step_factor) break;
        bytes *= opt_.step_factor;
      } else {
        if (bytes > SIZE_MAX - opt_.step_bytes) break;
        bytes += opt_.step_bytes;
      }
    }
    return true;
  }

  const PerfOptions& opt_;
  const Collective& coll_;
  const char* program_;
  braidComm_t comm_ = nullptr;
  int rank_ = 0;
  int nranks_ = 1;
  HostBuffer send_, recv_, expected_;
  bool barrier_missing_ = false;
  uint64_t check_rep_ = 0;
  int errors_ = 0;  // rows (out-of-place or in-place) with wrong elements
  double bw_sum_ = 0;
  int bw_count_ = 0;
  JsonReport json_;
  FILE* json_file_ = nullptr;  // rank 0 with -J only
  std::string last_error_;
};

}  // namespace

int PerfMain(int argc, char** argv, const Collective& collective) {
  const char* program = collective.Name();
  PerfOptions options;
  std::string error;
  switch (ParsePerfArgs(argc, argv, &options, &error)) {
    case ParseOutcome::kHelp:
      std::printf("%s", PerfUsage(argv[0]).c_str());
      return 0;
    case ParseOutcome::kError:
      std::fprintf(stderr, "%s: %s\n%s", program, error.c_str(), PerfUsage(argv[0]).c_str());
      return 2;
    case ParseOutcome::kRun: break;
  }
  Runner runner(options, collective, program, argc, argv);
  int exit_status = 0;
  if (runner.Main(&exit_status)) return exit_status;
  std::fflush(stdout);
  runner.WriteJsonAfterFailure();
  return 3;  // reported where it happened; ~Runner aborts the communicator
}

}  // namespace braid::bench
