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
#include "bench/perf_device.h"
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

// Rows of at least this size print all_reduce_perf's memory bound with --device cuda.
constexpr size_t kMemoryBoundMinBytes = size_t{64} << 20;
// The device-to-device copy the bound's B comes from: large enough to reach HBM's rate.
constexpr size_t kCopyRateBytes = size_t{256} << 20;
constexpr int kCopyRateReps = 10;

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
    if (device_) {
      device_->Free(send_d_);
      device_->Free(recv_d_);
    }
  }

  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // The sweep. True with *exit_status 0 (all correct), 1 (wrong elements) or 2 (a root outside
  // the communicator); false after a failure, already reported.
  [[nodiscard]] bool Main(int* exit_status) {
    // The GPU is chosen before the communicator is made: braid (as NCCL) may bind a
    // communicator to the current device.
    DeviceStatus device_status = DeviceStatus::kReady;
    std::string device_why;
    if (opt_.device_buffers) device_ = OpenBenchDevice(&device_status, &device_why);
    if (!Init()) return false;
    if (opt_.device_buffers && !AgreeOnDevices(device_status, device_why, exit_status)) {
      return *exit_status != 0;
    }
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
    if (!AllocateBuffers() || !PrintPreamble() || !PrintDevices() || !MeasureCopyRate()) {
      return false;
    }
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
    PrintMemoryBound();
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

  // --device cuda on every rank or on none: each rank says whether it has its GPU, and all
  // stop alike if one has not. True to go on; false with *exit_status 77 (no GPU, or a bench
  // without CUDA: a skip, which is not a pass) or 0 after a failure already reported.
  [[nodiscard]] bool AgreeOnDevices(DeviceStatus status, const std::string& why,
                                    int* exit_status) {
    int32_t worst = status == DeviceStatus::kReady ? 0 : status == DeviceStatus::kFailed ? 2 : 1;
    if (worst != 0) {
      std::fprintf(stderr, "%s: rank %d: --device cuda: %s\n", program_, rank_, why.c_str());
    }
    if (!Check(braidAllReduce(&worst, &worst, 1, braidInt32, braidMax, comm_, nullptr),
               "braidAllReduce (device check)")) {
      *exit_status = 0;
      return false;
    }
    if (worst == 0) {
      json_.buffers = "cuda";
      return true;
    }
    if (rank_ == 0) {
      std::printf("# SKIPPED: %s --device cuda: %s; nothing was measured\n", coll_.Name(),
                  worst == 1 ? (why.empty() ? "a rank has no CUDA device" : why.c_str())
                             : "a rank could not open its GPU (see its message)");
      std::fflush(stdout);
    }
    Destroy();
    *exit_status = worst == 1 ? 77 : 3;
    return false;
  }

  // B for all_reduce_perf's memory bound: each rank times device-to-device copies on its own
  // GPU while the others wait (ranks sharing a GPU would otherwise slow each other's copies),
  // and the largest rate counts (the bound must not be set too low).
  [[nodiscard]] bool MeasureCopyRate() {
    if (!device_ || !coll_.PrintsMemoryBound() || opt_.max_bytes < kMemoryBoundMinBytes) {
      return true;
    }
    double rate = 0;
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_ && !device_->MeasureCopyRate(kCopyRateBytes, kCopyRateReps, &rate,
                                                  &last_error_)) {
        return DeviceFailed();
      }
      if (!Barrier()) return false;
    }
    if (!Check(braidAllReduce(&rate, &rate, 1, braidFloat64, braidMax, comm_, nullptr),
               "braidAllReduce (copy rate)")) {
      return false;
    }
    copy_rate_ = rate;
    return true;
  }

  // The bound for the rows collected in bound_rows_, after the table (the table's own lines
  // stay nccl-tests' byte for byte).
  void PrintMemoryBound() {
    if (bound_rows_.empty() || copy_rate_ <= 0) return;
    JsonMemoryBound& m = json_.memory_bound;
    m.copy_gbps = copy_rate_ / 1e9;
    m.ranks_per_gpu = ranks_per_gpu_;
    const double factor = coll_.BusBandwidthFactor(nranks_);
    for (const BoundRow& row : bound_rows_) {
      const double n = static_cast<double>(ranks_per_gpu_);
      const double bound_s = 2.0 * n * static_cast<double>(row.bytes) / copy_rate_;
      JsonBoundRow b;
      b.bytes = row.bytes;
      b.bound_us = bound_s * 1e6;
      b.bound_busbw = static_cast<double>(row.bytes) / 1e9 / bound_s * factor;
      b.out_of_place_percent = row.out_of_place_us > 0 ? 100.0 * b.bound_us / row.out_of_place_us : 0;
      b.in_place_percent = row.in_place_us > 0 ? 100.0 * b.bound_us / row.in_place_us : 0;
      m.rows.push_back(b);
    }
    if (rank_ != 0) return;
    std::printf("# Memory bound: %d rank(s) on one GPU read N inputs and write N outputs, so "
                "t >= 2*N*S/B with N = %d,\n", ranks_per_gpu_, ranks_per_gpu_);
    std::printf("#   B = %.1f GB/s device-to-device copy (bytes read + written, %zu MiB copies, "
                "measured in this run)\n", m.copy_gbps, kCopyRateBytes >> 20);
    std::printf("# %10s  %10s  %12s  %14s  %10s\n", "size", "bound", "bound busbw",
                "out-of-place", "in-place");
    std::printf("# %10s  %10s  %12s  %14s  %10s\n", "(B)", "(us)", "(GB/s)", "(% of bound)",
                "(% of bound)");
    for (const JsonBoundRow& b : m.rows) {
      std::printf("# %10zu  %10.2f  %12.2f  %14.1f  %10.1f\n", b.bytes, b.bound_us,
                  b.bound_busbw, b.out_of_place_percent, b.in_place_percent);
    }
  }

  // A failed CUDA call of the bench's own (last_error_ holds CUDA's message).
  [[nodiscard]] bool DeviceFailed() {
    last_error_ = Printf("rank %d: %s", rank_, last_error_.c_str());
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
    if (device_) {
      // The host buffers stay as staging: data is made there, copied in, checked there.
      send_d_ = device_->Allocate(send, &last_error_);
      if (send_d_ == nullptr) return DeviceFailed();
      recv_d_ = device_->Allocate(recv, &last_error_);
      if (recv_d_ == nullptr) return DeviceFailed();
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
                  device_ ? FormatCudaDeviceLine(rank_, pid, host, device_->ordinal(),
                                                 device_->Description()).c_str()
                          : FormatDeviceLine(rank_, pid, host).c_str());
    // Which ranks share a GPU (the memory bound's N): host name and GPU UUID per rank.
    constexpr size_t kId = 128;
    std::vector<char> ids(kId * static_cast<size_t>(nranks_), 0);
    if (device_) {
      std::snprintf(&ids[kId * static_cast<size_t>(rank_)], kId, "%s/%s", host,
                    device_->Uuid().c_str());
      if (!Check(braidAllReduce(ids.data(), ids.data(), ids.size(), braidUint8, braidSum, comm_,
                                nullptr),
                 "braidAllReduce (GPU identities)")) {
        return false;
      }
      for (int r = 0; r < nranks_; ++r) {
        int sharing = 0;
        for (int q = 0; q < nranks_; ++q) {
          sharing += std::strncmp(&ids[kId * r], &ids[kId * q], kId) == 0 ? 1 : 0;
        }
        ranks_per_gpu_ = std::max(ranks_per_gpu_, sharing);
      }
    }
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
      JsonDevice d;
      d.rank = r;
      d.pid = pids[static_cast<size_t>(r)];
      if (device_) {  // "... device  0 [0000:00:06] NVIDIA H100 80GB HBM3"
        if (const char* dev = std::strstr(line, " device ")) {
          d.device = std::atoi(dev + 8);
          const char* open = std::strchr(dev, '[');
          const char* close = open ? std::strchr(open, ']') : nullptr;
          if (open && close) {
            d.device_hex.assign(open + 1, static_cast<size_t>(close - open - 1));
            d.device_info = close + 1;
            while (!d.device_info.empty() && (d.device_info.back() == '\n' || d.device_info.back() == ' ')) {
              d.device_info.pop_back();
            }
            if (!d.device_info.empty() && d.device_info.front() == ' ') d.device_info.erase(0, 1);
          }
        }
      }
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

  // The pointers the collective gets: into the device buffers with --device cuda, else into
  // the host buffers, at the same offsets.
  RankBuffers Pointers(const CollSizes& s, braidDataType_t type, bool in_place) {
    const size_t elem = TypeSize(type);
    const size_t r = static_cast<size_t>(rank_);
    char* send = device_ ? static_cast<char*>(send_d_) : send_.get();
    char* recv = device_ ? static_cast<char*>(recv_d_) : recv_.get();
    if (!in_place) return RankBuffers{send, recv};
    return RankBuffers{recv + s.send_inplace_offset * r * elem,
                       recv + s.recv_inplace_offset * r * elem};
  }

  braidStream_t Stream() const { return device_ ? device_->stream() : nullptr; }

  [[nodiscard]] bool RunOnce(const CollSizes& s, braidDataType_t type, braidRedOp_t op,
                             bool in_place) {
    const RankBuffers b = Pointers(s, type, in_place);
    return Check(coll_.Run(b.send, b.recv, s, type, op, opt_.root, comm_, Stream()),
                 coll_.CallName());
  }

  // Data made in the host buffers by PrepareRank goes to the device buffers (--device cuda).
  [[nodiscard]] bool CopyIn(const CollSizes& s, braidDataType_t type) {
    if (!device_) return true;
    size_t send_bytes, recv_bytes;
    BufferBytes(s, TypeSize(type), rank_, &send_bytes, &recv_bytes);
    if (!device_->CopyIn(send_d_, send_.get(), send_bytes, &last_error_) ||
        !device_->CopyIn(recv_d_, recv_.get(), recv_bytes, &last_error_)) {
      return DeviceFailed();
    }
    return true;
  }

  // The result back into the host buffer, where CountWrong reads it.
  [[nodiscard]] bool CopyOut(const CollSizes& s, braidDataType_t type) {
    if (!device_) return true;
    size_t send_bytes, recv_bytes;
    BufferBytes(s, TypeSize(type), rank_, &send_bytes, &recv_bytes);
    if (!device_->CopyOut(recv_.get(), recv_d_, recv_bytes, &last_error_)) return DeviceFailed();
    return true;
  }

  // Every collective queued so far on this rank has run (device mode; host calls complete
  // inside the call).
  [[nodiscard]] bool Complete() {
    if (device_ && !device_->Synchronize(&last_error_)) return DeviceFailed();
    return true;
  }

  // Times one half of a row (out of place or in place), checks it and prints its columns.
  [[nodiscard]] bool BenchTime(const CollSizes& s, braidDataType_t type, braidRedOp_t op,
                               bool in_place, JsonResult* result) {
    const size_t elem = TypeSize(type);
    const int checks = (in_place && !coll_.ChecksInPlace()) ? 0 : opt_.check;
    if (checks > 0) {
      PrepareRank(coll_, s, type, op, opt_.root, rank_, nranks_, 0, in_place, send_.get(),
                  recv_.get(), expected_.get());
      if (!CopyIn(s, type)) return false;
    }
    if (!RunOnce(s, type, op, in_place) || !Complete() || !Barrier()) return false;

    // Host buffers: the host clock around the calls (each completes inside its call). Device
    // buffers: events on the rank's stream around the queued collectives, as nccl-tests.
    const auto start = std::chrono::steady_clock::now();
    if (device_ && !device_->StartTimer(&last_error_)) return DeviceFailed();
    for (int iter = 0; iter < opt_.iters; ++iter) {
      for (int a = 0; a < opt_.agg_iters; ++a) {
        if (!RunOnce(s, type, op, in_place)) return false;
        if (opt_.blocking == 1 && (!Complete() || !Barrier())) return false;
      }
    }
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (device_ && !device_->StopTimer(&elapsed, &last_error_)) return DeviceFailed();
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
      if (!CopyIn(s, type) || !RunOnce(s, type, op, in_place) || !CopyOut(s, type)) {
        return false;
      }
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
    if (!Complete()) return false;
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
      if (copy_rate_ > 0 && row.bytes >= kMemoryBoundMinBytes) {
        bound_rows_.push_back(BoundRow{row.bytes, row.out_of_place.time_us, row.in_place.time_us});
      }
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
  // --device cuda: the rank's GPU and its buffers (same sizes as send_ and recv_).
  std::unique_ptr<BenchDevice> device_;
  void* send_d_ = nullptr;
  void* recv_d_ = nullptr;
  int ranks_per_gpu_ = 1;   // the most ranks on one GPU (the memory bound's N)
  double copy_rate_ = 0;    // B, bytes per second; 0 when no bound is printed
  struct BoundRow {
    size_t bytes;
    double out_of_place_us, in_place_us;
  };
  std::vector<BoundRow> bound_rows_;
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
  if (runner.Main(&exit_status)) return exit_status;  // 77: --device cuda without a GPU
  std::fflush(stdout);
  runner.WriteJsonAfterFailure();
  return 3;  // reported where it happened; ~Runner aborts the communicator
}

}  // namespace braid::bench
