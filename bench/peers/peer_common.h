// The shared half of gloo_perf and mpi_perf: braid's peers measured the way braid's own *_perf
// programs measure braid, so one parser reads all three tables.
//
// Flags, preamble, header, row widths, number formatting and the closing lines follow
// nccl-tests 2.19 (see bench/perf_common.h and shared/anchors/nccl_tests_*); sizes, counts,
// in-place offsets and the algbw/busbw formulas are nccl-tests' *GetCollByteCount / *GetBw.
// Only float32, sum, one thread and host memory. Header-only so each peer builds with one
// compiler command (bench/peers/build.sh) and nothing here touches Bazel or braid.
//
// A peer supplies a Backend (rank, size, barrier, an allgather of bytes for bookkeeping, and the
// four collectives); PeerMain does the rest.
#pragma once

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace peers {

enum class Coll {
  kAllReduce, kBroadcast, kAllGather, kReduceScatter,
  // Measured out of place only (--no-inplace), as compare.py runs them.
  kReduce, kGather, kScatter, kAllToAll, kSendRecv
};

// The collectives that have a root (-r).
inline bool Rooted(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}
inline bool Reduces(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce;
}
inline bool HasInPlace(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kBroadcast || c == Coll::kAllGather ||
         c == Coll::kReduceScatter;
}

inline const char* CollProgram(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return "all_reduce_perf";
    case Coll::kBroadcast: return "broadcast_perf";
    case Coll::kAllGather: return "all_gather_perf";
    case Coll::kReduceScatter: return "reduce_scatter_perf";
    case Coll::kReduce: return "reduce_perf";
    case Coll::kGather: return "gather_perf";
    case Coll::kScatter: return "scatter_perf";
    case Coll::kAllToAll: return "alltoall_perf";
    case Coll::kSendRecv: return "sendrecv_perf";
  }
  return "?";
}

inline bool ParseColl(const char* s, Coll* c) {
  const std::string v(s);
  if (v == "all_reduce" || v == "allreduce" || v == "all_reduce_perf") *c = Coll::kAllReduce;
  else if (v == "broadcast" || v == "bcast" || v == "broadcast_perf") *c = Coll::kBroadcast;
  else if (v == "all_gather" || v == "allgather" || v == "all_gather_perf") *c = Coll::kAllGather;
  else if (v == "reduce_scatter" || v == "reducescatter" || v == "reduce_scatter_perf")
    *c = Coll::kReduceScatter;
  else if (v == "reduce" || v == "reduce_perf") *c = Coll::kReduce;
  else if (v == "gather" || v == "gather_perf") *c = Coll::kGather;
  else if (v == "scatter" || v == "scatter_perf") *c = Coll::kScatter;
  else if (v == "alltoall" || v == "all_to_all" || v == "alltoall_perf") *c = Coll::kAllToAll;
  else if (v == "sendrecv" || v == "sendrecv_perf") *c = Coll::kSendRecv;
  else return false;
  return true;
}

inline std::string Printf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// ---- Command line (nccl-tests' flags that make sense here, plus three long options) ---------

struct Options {
  size_t min_bytes = 32 << 20;  // -b
  size_t max_bytes = 32 << 20;  // -e
  size_t step_bytes = 1 << 20;  // -i
  size_t step_factor = 1;       // -f
  int iters = 20;               // -n
  int warmup_iters = 1;         // -w
  int check = 1;                // -c
  int root = 0;                 // -r
  int average = 1;              // -a: 0 rank 0, 1 avg, 2 min, 3 max
  bool in_place = true;         // --no-inplace: out-of-place columns only
  Coll coll = Coll::kAllReduce; // --coll
  std::string algo;             // --algo (backend specific)
};

inline bool ParseSize(const char* text, size_t* out) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || !(v >= 0)) return false;
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0; ++end; break;
    case 'm': case 'M': mult = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

inline bool ParseInt(const char* text, int lo, int* out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > 1000000000L) return false;
  *out = static_cast<int>(v);
  return true;
}

inline std::string Usage(const char* program, const char* algos) {
  return Printf(
      "Usage: %s --coll all_reduce|broadcast|all_gather|reduce_scatter|reduce|gather|scatter|\n"
      "              alltoall|sendrecv [nccl-tests flags]\n"
      "  -b/-e/-i/-f  min bytes, max bytes, step bytes, step factor (as nccl-tests)\n"
      "  -n iters  -w warmup iters  -c check (0/1)  -r root  -a 0|1|2|3 time across ranks\n"
      "  -d float  -o sum  (the only type and op)\n"
      "  --no-inplace  out-of-place columns only (required for reduce, gather, scatter,\n"
      "                alltoall and sendrecv, which are measured out of place only)\n"
      "  --algo NAME   %s\n",
      program, algos);
}

// Returns 0 to run, 1 after --help, 2 on a bad flag (message on stderr).
inline int ParseOptions(int argc, char** argv, Options* o, const char* algos) {
  static const struct option kLong[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"root", required_argument, nullptr, 'r'},
      {"average", required_argument, nullptr, 'a'},
      {"datatype", required_argument, nullptr, 'd'},
      {"op", required_argument, nullptr, 'o'},
      {"coll", required_argument, nullptr, 'C'},
      {"algo", required_argument, nullptr, 'A'},
      {"no-inplace", no_argument, nullptr, 'I'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  auto bad = [&](const char* what) {
    std::fprintf(stderr, "%s: %s\n%s", argv[0], what, Usage(argv[0], algos).c_str());
    return 2;
  };
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:c:r:a:d:o:t:g:m:z:C:A:Ih", kLong, nullptr)) != -1) {
    const char* v = optarg;
    int n = 0;
    switch (c) {
      case 'b': if (!ParseSize(v, &o->min_bytes)) return bad("bad -b"); break;
      case 'e': if (!ParseSize(v, &o->max_bytes)) return bad("bad -e"); break;
      case 'i': if (!ParseSize(v, &o->step_bytes) || o->step_bytes == 0) return bad("bad -i"); break;
      case 'f': if (!ParseInt(v, 1, &n)) return bad("bad -f"); o->step_factor = n; break;
      case 'n': if (!ParseInt(v, 1, &o->iters)) return bad("bad -n"); break;
      case 'w': if (!ParseInt(v, 0, &o->warmup_iters)) return bad("bad -w"); break;
      case 'c': if (!ParseInt(v, 0, &o->check)) return bad("bad -c"); break;
      case 'r': if (!ParseInt(v, 0, &o->root)) return bad("bad -r"); break;
      case 'a': if (!ParseInt(v, 0, &o->average) || o->average > 3) return bad("bad -a"); break;
      case 'd': if (std::strcmp(v, "float") != 0) return bad("-d: only float"); break;
      case 'o': if (std::strcmp(v, "sum") != 0) return bad("-o: only sum"); break;
      case 't': case 'g': case 'm':
        if (std::strcmp(v, "1") != 0) return bad("-t/-g/-m: only 1");
        break;
      case 'z': break;  // host calls block anyway
      case 'C': if (!ParseColl(v, &o->coll)) return bad("bad --coll"); break;
      case 'A': o->algo = v; break;
      case 'I': o->in_place = false; break;
      case 'h': std::printf("%s", Usage(argv[0], algos).c_str()); return 1;
      default: return bad("unknown option or missing value");
    }
  }
  if (optind < argc) return bad("unexpected argument");
  if (o->min_bytes > o->max_bytes) return bad("-b is larger than -e");
  if (o->in_place && !HasInPlace(o->coll)) {
    return bad("this collective is measured out of place only: add --no-inplace");
  }
  return 0;
}

// ---- Sizes, as nccl-tests' *GetCollByteCount (ALIGN 4 for the gathers) --------------------

struct Sizes {
  size_t send_count = 0, recv_count = 0, param_count = 0;
  size_t send_inplace_offset = 0, recv_inplace_offset = 0;
};

inline Sizes CollSizes(Coll c, size_t count, int nranks) {
  Sizes s;
  const size_t n = static_cast<size_t>(nranks);
  const size_t base = (count / (4 * n)) * 4;
  switch (c) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv:
      s.send_count = s.recv_count = s.param_count = count;
      break;
    case Coll::kAllToAll:  // count / n per peer, a multiple of 16 bytes
      s.param_count = base;
      s.send_count = s.recv_count = base * n;
      break;
    case Coll::kGather:
    case Coll::kAllGather:
      s.send_count = base;
      s.recv_count = base * n;
      s.param_count = base;
      s.send_inplace_offset = base;
      break;
    case Coll::kScatter:
    case Coll::kReduceScatter:
      s.send_count = base * n;
      s.recv_count = base;
      s.param_count = base;
      s.recv_inplace_offset = base;
      break;
  }
  return s;
}

// nccl-tests' *GetBw: algbw in GB/s and the bus-bandwidth factor.
inline double AlgBw(Coll c, size_t param_count, double seconds, int nranks) {
  double bytes = static_cast<double>(param_count) * sizeof(float);
  if (c == Coll::kAllGather || c == Coll::kReduceScatter || c == Coll::kGather ||
      c == Coll::kScatter || c == Coll::kAllToAll) {
    bytes *= nranks;
  }
  return seconds > 0 ? bytes / 1e9 / seconds : 0;
}
inline double BusFactor(Coll c, int nranks) {
  switch (c) {
    case Coll::kAllReduce: return 2.0 * (nranks - 1) / nranks;
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv: return 1.0;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kGather:
    case Coll::kScatter:
    case Coll::kAllToAll: return static_cast<double>(nranks - 1) / nranks;
  }
  return 1.0;
}

// ---- Output, exactly as bench/perf_table.cc -------------------------------------------------

inline std::string FormatFloat(double value, int width) {
  if (!std::isfinite(value)) return Printf("%*g", width, value);
  int power = 0;
  for (uint64_t v = 1; value >= static_cast<double>(v) && power < 20; v *= 10) power++;
  if (power < width - 2) return Printf("%*.2f", width, value);
  if (power < width - 1) return Printf("%*.1f", width, value);
  if (power < width + 1) return Printf("%*.0f", width, value);
  if (width >= 7) return Printf("%*.1e", width, value);
  return Printf("%*.0e", width, value);
}

inline std::string FormatTableHeader(bool in_place) {
  std::string s = Printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       %s\n",
                         "", "", "", "", "", in_place ? "in-place          " : "");
  if (in_place) {
    s += Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong", "");
    s += Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "", "");
  } else {
    s += Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s %s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "");
    s += Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s %s\n", "(B)", "(elements)", "",
                "", "", "(us)", "(GB/s)", "(GB/s)", "", "");
  }
  return s;
}

inline std::string FormatRowPrefix(size_t bytes, size_t count, const char* type, const char* op,
                                   int root) {
  return Printf("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, op, root);
}

inline std::string FormatRowBody(double time_us, double algbw, double busbw, int64_t wrong) {
  const std::string t = FormatFloat(time_us, 7);
  const std::string a = FormatFloat(algbw, 6);
  const std::string b = FormatFloat(busbw, 6);
  if (wrong < 0) return Printf("  %7s  %6s  %6s    N/A", t.c_str(), a.c_str(), b.c_str());
  return Printf("  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(), static_cast<double>(wrong));
}

// ---- Data: small integers, so every float sum is exact --------------------------------------

inline float Pattern(int rank, size_t i, uint64_t seed) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13 + seed * 5) % 17) - 8);
}

// ---- The backend a peer implements ----------------------------------------------------------

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int Rank() const = 0;
  virtual int Size() const = 0;
  // Words after "nccl-tests version 2.19.6" in the first line: "gloo=0.5.0 transport=tcp ...".
  virtual std::string Describe() const = 0;
  virtual void Barrier() = 0;
  // Bookkeeping only (device lines, times, #wrong): every rank's `bytes` bytes, in rank order.
  virtual void AllGatherBytes(const void* in, void* out, size_t bytes) = 0;
  // Called once per row and placement before the row's calls, with the row's buffers (Gloo's
  // legacy algorithms are objects built for one buffer and count).
  virtual void Prepare(Coll, const Sizes&, const float* /*send*/, float* /*recv*/, bool /*in_place*/,
                       int /*root*/) {}
  // One collective. Out of place: send -> recv. In place (send == nullptr): the data is already
  // in recv (at nccl-tests' in-place
  // send offset; for reduce-scatter the whole input from the start of recv).
  virtual void Run(Coll c, const Sizes& s, const float* send, float* recv, bool in_place,
                   int root) = 0;
  // Where this rank's result is after Run. Default: recv, at nccl-tests' in-place offset when
  // in place. MPI_IN_PLACE and Gloo put a reduce-scatter's block at the start of the buffer, and
  // MPI's broadcast root keeps its data in the buffer it sent from.
  virtual const float* Result(Coll c, const Sizes& s, const float* /*send*/, const float* recv,
                              bool in_place, int rank, int /*root*/) const {
    if (!in_place) return recv;
    if (c == Coll::kReduceScatter) return recv;
    return recv + s.recv_inplace_offset * static_cast<size_t>(rank);
  }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, FreeDeleter>;

inline Buffer Allocate(size_t elements) {
  void* p = nullptr;
  const size_t bytes = std::max<size_t>(elements * sizeof(float), 64);
  if (posix_memalign(&p, 4096, bytes) != 0) throw std::runtime_error("out of host memory");
  std::memset(p, 0, bytes);  // touch every page before any timing
  return Buffer(static_cast<float*>(p));
}

class Driver {
 public:
  Driver(const Options& o, Backend& b) : o_(o), b_(b), rank_(b.Rank()), n_(b.Size()) {}

  int Main() {
    if (Rooted(o_.coll) && o_.root >= n_) {
      if (rank_ == 0) std::fprintf(stderr, "-r %d: the root must be < %d ranks\n", o_.root, n_);
      return 2;
    }
    const Sizes big = CollSizes(o_.coll, o_.max_bytes / sizeof(float), n_);
    const size_t r = static_cast<size_t>(rank_);
    send_ = Allocate(big.send_count);
    const size_t recv = std::max({big.recv_count, big.recv_inplace_offset * r + big.recv_count,
                                  big.send_inplace_offset * r + big.send_count, big.send_count});
    recv_ = Allocate(recv);
    expected_ = Allocate(recv);
    recv_elems_ = recv;

    if (rank_ == 0) {
      std::printf("# nccl-tests version 2.19.6 %s\n", b_.Describe().c_str());
      std::printf("# Collective test starting: %s\n", CollProgram(o_.coll));
      const bool factor = o_.step_factor > 1;
      std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
                  "iters: %d agg iters: %d validation: %d graph: %d unalign: %d\n",
                  1, 1, o_.min_bytes, o_.max_bytes, factor ? o_.step_factor : o_.step_bytes,
                  factor ? "factor" : "bytes", o_.warmup_iters, o_.iters, 1, o_.check, 0, 0);
      std::printf("#\n");
    }
    PrintDevices();
    if (rank_ == 0) std::printf("#\n%s", FormatTableHeader(o_.in_place).c_str());
    Flush();

    const bool reduces = Reduces(o_.coll);
    const int root = Rooted(o_.coll) ? o_.root : -1;
    for (size_t bytes : {o_.max_bytes, o_.min_bytes}) {
      const Sizes s = CollSizes(o_.coll, bytes / sizeof(float), n_);
      b_.Prepare(o_.coll, s, send_.get(), recv_.get(), false, o_.root);
      for (int w = 0; w < o_.warmup_iters; ++w)
        b_.Run(o_.coll, s, send_.get(), recv_.get(), false, o_.root);
    }
    for (size_t bytes = o_.min_bytes; bytes <= o_.max_bytes;) {
      const Sizes s = CollSizes(o_.coll, bytes / sizeof(float), n_);
      if (rank_ == 0) {
        const size_t row = std::max(s.send_count, s.recv_count) * sizeof(float);
        std::printf("%s", FormatRowPrefix(row, s.param_count, "float", reduces ? "sum" : "none",
                                          root).c_str());
      }
      BenchTime(s, false);
      if (o_.in_place) BenchTime(s, true);
      if (rank_ == 0) std::printf("\n");
      Flush();
      if (o_.step_factor > 1) {
        if (bytes == 0) break;
        bytes *= o_.step_factor;
      } else {
        bytes += o_.step_bytes;
      }
    }
    if (rank_ == 0) {
      const double avg = bw_count_ ? bw_sum_ / bw_count_ : 0;
      std::printf("# %-20s : %d %s\n", "Out of bounds values", errors_, errors_ ? "FAILED" : "OK");
      std::printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg, "");
      std::printf("#\n# Collective test concluded: %s\n#\n\n", CollProgram(o_.coll));
    }
    Flush();
    return errors_ ? 1 : 0;
  }

 private:
  void Flush() {
    if (rank_ == 0) std::fflush(stdout);
  }

  void PrintDevices() {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
    if (char* dot = std::strchr(host, '.')) *dot = '\0';
    constexpr size_t kLine = 256;
    char line[kLine] = {0};
    std::snprintf(line, kLine, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] host memory\n",
                  rank_, 0, static_cast<int>(getpid()), host, -1);
    std::vector<char> all(kLine * n_);
    b_.AllGatherBytes(line, all.data(), kLine);
    if (rank_ == 0) {
      std::printf("# Using devices\n");
      for (int i = 0; i < n_; ++i) {
        all[i * kLine + kLine - 1] = '\0';
        std::printf("%s", &all[i * kLine]);
      }
    }
  }

  template <typename T>
  std::vector<T> Gather(T v) {
    std::vector<T> all(n_);
    b_.AllGatherBytes(&v, all.data(), sizeof(T));
    return all;
  }

  double CombineTime(double seconds) {
    const std::vector<double> all = Gather(seconds);
    switch (o_.average) {
      case 0: return all[0];
      case 2: return *std::min_element(all.begin(), all.end());
      case 3: return *std::max_element(all.begin(), all.end());
      default: {
        double sum = 0;
        for (double t : all) sum += t;
        return sum / n_;
      }
    }
  }

  const float* SendPtr(bool in_place) const { return in_place ? nullptr : send_.get(); }

  // Fills the input (for in-place runs, inside recv) over a poisoned recv, and the expected
  // result. seed 0 is the timing data: zeros, so in-place reductions repeated many times stay
  // finite and no denormals slow anyone down.
  void InitData(const Sizes& s, bool in_place, uint64_t seed) {
    std::memset(recv_.get(), 0xA5, recv_elems_ * sizeof(float));
    const size_t r = static_cast<size_t>(rank_);
    float* in = in_place ? recv_.get() + s.send_inplace_offset * r : send_.get();
    if (in_place && o_.coll == Coll::kReduceScatter) in = recv_.get();  // see Backend::Result
    auto value = [&](int rank, size_t i) { return seed == 0 ? 0.0f : Pattern(rank, i, seed); };
    float* exp = expected_.get();
    switch (o_.coll) {
      case Coll::kAllReduce:
        for (size_t i = 0; i < s.send_count; ++i) {
          in[i] = value(rank_, i);
          float sum = 0;
          for (int k = 0; k < n_; ++k) sum += value(k, i);
          exp[i] = sum;
        }
        break;
      case Coll::kBroadcast:
        for (size_t i = 0; i < s.send_count; ++i) {
          in[i] = value(rank_, i);  // only the root's matters
          exp[i] = value(o_.root, i);
        }
        break;
      case Coll::kAllGather:
        for (size_t i = 0; i < s.send_count; ++i) in[i] = value(rank_, i);
        for (int k = 0; k < n_; ++k)
          for (size_t i = 0; i < s.send_count; ++i) exp[k * s.send_count + i] = value(k, i);
        break;
      case Coll::kReduceScatter:
        for (size_t i = 0; i < s.send_count; ++i) in[i] = value(rank_, i);
        for (size_t i = 0; i < s.recv_count; ++i) {
          float sum = 0;
          for (int k = 0; k < n_; ++k) sum += value(k, r * s.recv_count + i);
          exp[i] = sum;
        }
        break;
      case Coll::kReduce:  // only the root's result is checked (CountWrong)
        for (size_t i = 0; i < s.send_count; ++i) {
          in[i] = value(rank_, i);
          float sum = 0;
          for (int k = 0; k < n_; ++k) sum += value(k, i);
          exp[i] = sum;
        }
        break;
      case Coll::kGather:  // only the root's result is checked
        for (size_t i = 0; i < s.send_count; ++i) in[i] = value(rank_, i);
        for (int k = 0; k < n_; ++k)
          for (size_t i = 0; i < s.send_count; ++i) exp[k * s.send_count + i] = value(k, i);
        break;
      case Coll::kScatter:  // the root's block k goes to rank k
        for (int k = 0; k < n_; ++k)
          for (size_t i = 0; i < s.recv_count; ++i) in[k * s.recv_count + i] = value(k, i);
        for (size_t i = 0; i < s.recv_count; ++i) exp[i] = value(rank_, i);
        break;
      case Coll::kAllToAll: {  // block (from, to) carries pattern "rank" from * n + to
        const size_t m = s.param_count;
        for (int k = 0; k < n_; ++k) {
          for (size_t i = 0; i < m; ++i) {
            in[k * m + i] = value(rank_ * n_ + k, i);
            exp[k * m + i] = value(k * n_ + rank_, i);
          }
        }
        break;
      }
      case Coll::kSendRecv:  // to rank + 1, from rank - 1
        for (size_t i = 0; i < s.send_count; ++i) {
          in[i] = value(rank_, i);
          exp[i] = value((rank_ + n_ - 1) % n_, i);
        }
        break;
    }
  }

  int64_t CountWrong(const Sizes& s, bool in_place) const {
    // MPI leaves a non-root's receive buffer undefined for reduce and gather (Gloo uses it).
    if ((o_.coll == Coll::kReduce || o_.coll == Coll::kGather) && rank_ != o_.root) return 0;
    const float* got =
        b_.Result(o_.coll, s, send_.get(), recv_.get(), in_place, rank_, o_.root);
    int64_t wrong = 0;
    for (size_t i = 0; i < s.recv_count; ++i) wrong += got[i] != expected_.get()[i];
    return wrong;
  }

  void BenchTime(const Sizes& s, bool in_place) {
    InitData(s, in_place, 0);
    b_.Prepare(o_.coll, s, SendPtr(in_place), recv_.get(), in_place, o_.root);
    b_.Run(o_.coll, s, SendPtr(in_place), recv_.get(), in_place, o_.root);
    b_.Barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < o_.iters; ++it) {
      b_.Run(o_.coll, s, SendPtr(in_place), recv_.get(), in_place, o_.root);
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double seconds = CombineTime(elapsed / o_.iters);
    const double algbw = AlgBw(o_.coll, s.param_count, seconds, n_);
    const double busbw = algbw * BusFactor(o_.coll, n_);
    b_.Barrier();

    int64_t wrong = o_.check > 0 ? 0 : -1;
    for (int c = 0; c < o_.check; ++c) {
      InitData(s, in_place, ++seed_);
      b_.Run(o_.coll, s, SendPtr(in_place), recv_.get(), in_place, o_.root);
      wrong = 0;
      for (int64_t w : Gather(CountWrong(s, in_place))) wrong += w;
      if (wrong != 0) break;
    }
    if (wrong > 0) ++errors_;
    if (rank_ == 0) std::printf("%s", FormatRowBody(seconds * 1e6, algbw, busbw, wrong).c_str());
    bw_sum_ += busbw;
    ++bw_count_;
  }

  const Options& o_;
  Backend& b_;
  const int rank_;
  const int n_;
  Buffer send_, recv_, expected_;
  size_t recv_elems_ = 0;
  uint64_t seed_ = 0;
  int errors_ = 0;
  double bw_sum_ = 0;
  int bw_count_ = 0;
};

}  // namespace peers
