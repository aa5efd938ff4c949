#include "bench/perf_common.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

namespace braid::bench {
namespace {

// nccl-tests' spelling, indexed by braidDataType_t / braidRedOp_t.
constexpr const char* kTypeNames[braidNumTypes] = {"int8",   "uint8", "int32",  "uint32",
                                                   "int64",  "uint64", "half",  "float",
                                                   "double", "bfloat16"};
constexpr size_t kTypeSizes[braidNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
constexpr const char* kOpNames[braidNumOps] = {"sum", "prod", "max", "min", "avg"};

std::string Printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

bool ParseInt(const char* text, long min, long max, int* out) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace

// ---- Command line -----------------------------------------------------------------------------

bool ParseSize(const char* text, size_t* out) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (errno != 0 || end == text || !(value >= 0) || std::isinf(value)) return false;
  double unit = 1;
  if (*end != '\0') {
    switch (*end) {
      case 'K': case 'k': unit = 1024.0; break;
      case 'M': case 'm': unit = 1024.0 * 1024; break;
      case 'G': case 'g': unit = 1024.0 * 1024 * 1024; break;
      default: return false;
    }
    if (end[1] != '\0') return false;
  }
  const double bytes = value * unit;
  if (bytes >= 18446744073709551615.0) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

std::string PerfUsage(const char* program) {
  std::string s = Printf("USAGE: %s\n", program);
  s +=
      "\t[-t,--nthreads <num threads>] (only 1)\n"
      "\t[-g,--ngpus <gpus per thread>] (only 1)\n"
      "\t[-b,--minbytes <min size in bytes>] (suffixes K, M, G)\n"
      "\t[-e,--maxbytes <max size in bytes>]\n"
      "\t[-i,--stepbytes <increment size>]\n"
      "\t[-f,--stepfactor <increment factor>]\n"
      "\t[-n,--iters <iteration count>]\n"
      "\t[-m,--agg_iters <aggregated iteration count>]\n"
      "\t[-w,--warmup_iters <warmup iteration count>]\n"
      "\t[-c,--check <check iteration count>]\n"
      "\t[-o,--op <sum/prod/min/max/avg/all>]\n"
      "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]\n"
      "\t[-r,--root <root>]\n"
      "\t[-z,--blocking <0/1>]\n"
      "\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n"
      "\t[-h,--help]\n"
      "Ranks come from the environment (braidrun, torchrun: RANK, WORLD_SIZE, MASTER_ADDR,\n"
      "MASTER_PORT; SLURM_*; Open MPI's OMPI_*); buffers are host memory.\n";
  return s;
}

ParseOutcome ParsePerfArgs(int argc, char** argv, PerfOptions* o, std::string* error) {
  static const struct option kLong[] = {
      {"nthreads", required_argument, nullptr, 't'},
      {"ngpus", required_argument, nullptr, 'g'},
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"agg_iters", required_argument, nullptr, 'm'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},
      {"blocking", required_argument, nullptr, 'z'},
      {"average", required_argument, nullptr, 'a'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  // nccl-tests flags braid's bench does not implement: named in the error instead of "unknown".
  static const char kUnsupported[] = "pyTGCRuNx";

  auto fail = [&](const std::string& message) {
    *error = message;
    return ParseOutcome::kError;
  };
  auto bad = [&](char flag, const char* value, const char* expected) {
    return fail(Printf("invalid value '%s' for -%c: expected %s", value, flag, expected));
  };

  opterr = 0;   // errors are reported by the caller, with the flag named
  optind = 0;   // glibc: full re-initialization, so tests can parse more than once
  int c;
  int long_index = 0;
  while ((c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:c:o:d:r:z:a:p:y:T:G:C:R:u:N:x:h", kLong,
                          &long_index)) != -1) {
    const char* v = optarg;
    switch (c) {
      case 't':
        if (!ParseInt(v, 1, INT_MAX, &o->nthreads)) return bad('t', v, "a positive integer");
        if (o->nthreads != 1) {
          return fail(Printf("-t %s: only 1 thread per process is supported; start one process "
                             "per rank (e.g. braidrun -n N)", v));
        }
        break;
      case 'g':
        if (!ParseInt(v, 1, INT_MAX, &o->ngpus)) return bad('g', v, "a positive integer");
        if (o->ngpus != 1) {
          return fail(Printf("-g %s: only 1 device per rank is supported; start one process per "
                             "rank (e.g. braidrun -n N)", v));
        }
        break;
      case 'b':
        if (!ParseSize(v, &o->min_bytes)) return bad('b', v, "a byte count such as 8, 1K, 64M, 1G");
        break;
      case 'e':
        if (!ParseSize(v, &o->max_bytes)) return bad('e', v, "a byte count such as 8, 1K, 64M, 1G");
        break;
      case 'i':
        if (!ParseSize(v, &o->step_bytes) || o->step_bytes == 0) {
          return bad('i', v, "a positive byte count");
        }
        break;
      case 'f': {
        int f;
        if (!ParseInt(v, 1, INT_MAX, &f)) return bad('f', v, "a positive integer");
        o->step_factor = static_cast<size_t>(f);
        break;
      }
      case 'n':
        if (!ParseInt(v, 1, INT_MAX, &o->iters)) return bad('n', v, "a positive integer");
        break;
      case 'm':
        if (!ParseInt(v, 1, INT_MAX, &o->agg_iters)) return bad('m', v, "a positive integer");
        break;
      case 'w':
        if (!ParseInt(v, 0, INT_MAX, &o->warmup_iters)) return bad('w', v, "an integer >= 0");
        break;
      case 'c':
        if (!ParseInt(v, 0, INT_MAX, &o->check)) return bad('c', v, "0 (no check) or 1");
        break;
      case 'r':
        if (!ParseInt(v, 0, INT_MAX, &o->root)) return bad('r', v, "a rank >= 0");
        break;
      case 'z':
        if (!ParseInt(v, 0, 2, &o->blocking)) return bad('z', v, "0 or 1");
        break;
      case 'a':
        if (!ParseInt(v, 0, 3, &o->average)) {
          return bad('a', v, "0 (rank 0), 1 (average), 2 (min) or 3 (max)");
        }
        break;
      case 'o': {
        o->ops.clear();
        for (int i = 0; i < braidNumOps; ++i) {
          if (std::strcmp(v, "all") == 0 || std::strcmp(v, kOpNames[i]) == 0) {
            o->ops.push_back(static_cast<braidRedOp_t>(i));
          }
        }
        if (o->ops.empty()) return bad('o', v, "sum, prod, max, min, avg or all");
        break;
      }
      case 'd': {
        o->types.clear();
        for (int i = 0; i < braidNumTypes; ++i) {
          if (std::strcmp(v, "all") == 0 || std::strcmp(v, kTypeNames[i]) == 0) {
            o->types.push_back(static_cast<braidDataType_t>(i));
          }
        }
        if (o->types.empty()) {
          return bad('d', v,
                     "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16 "
                     "or all");
        }
        break;
      }
      case 'h': return ParseOutcome::kHelp;
      case ':': {
        if (optopt != 0 && std::strchr(kUnsupported, optopt) != nullptr) {
          return fail(Printf("-%c is an nccl-tests option that braid's bench does not support",
                             optopt));
        }
        const char* name = (optopt != 0) ? nullptr : argv[optind - 1];
        if (name != nullptr) return fail(Printf("option %s needs a value", name));
        return fail(Printf("option -%c needs a value", optopt));
      }
      case '?': {
        if (optopt != 0) return fail(Printf("unknown option -%c", optopt));
        return fail(Printf("unknown option %s", argv[optind - 1]));
      }
      default:
        if (std::strchr(kUnsupported, c) != nullptr) {
          return fail(Printf("-%c is an nccl-tests option that braid's bench does not support", c));
        }
        return fail(Printf("unknown option -%c", c));
    }
  }
  if (optind < argc) return fail(Printf("unexpected argument '%s'", argv[optind]));
  if (o->max_bytes < o->min_bytes) {
    return fail(Printf("-e %zu is smaller than -b %zu", o->max_bytes, o->min_bytes));
  }
  if (o->step_factor > 1 && o->min_bytes == 0) {
    return fail("-b 0 with -f > 1 never grows; give -b a positive size");
  }
  return ParseOutcome::kRun;
}

// ---- Types ------------------------------------------------------------------------------------

size_t TypeSize(braidDataType_t type) {
  return (type >= 0 && type < braidNumTypes) ? kTypeSizes[type] : 0;
}
const char* TypeName(braidDataType_t type) {
  return (type >= 0 && type < braidNumTypes) ? kTypeNames[type] : "invalid";
}
const char* OpName(braidRedOp_t op) {
  return (op >= 0 && op < braidNumOps) ? kOpNames[op] : "invalid";
}
bool IsFloatingType(braidDataType_t type) {
  return type == braidFloat16 || type == braidFloat32 || type == braidFloat64 ||
         type == braidBfloat16;
}

// Plain branchy conversions, written for clarity, not speed.
uint16_t BenchFloatToHalf(float f) {
  const uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (the midpoint to 2^16): Inf
  if (a < 0x38800000u) {                        // below 2^-14: a multiple of 2^-24, rounded
    const double units = std::nearbyint(static_cast<double>(BitsToFloat(a)) * 16777216.0);
    return sign | static_cast<uint16_t>(units);  // 1024 units is the smallest normal: right too
  }
  const uint32_t exponent = (a >> 23) - 127 + 15;
  const uint32_t mantissa = a & 0x7FFFFFu;
  uint32_t h = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // nearest, ties to even
  return sign | static_cast<uint16_t>(h);
}

float BenchHalfToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  float v;
  if (exponent == 0x1F) {
    v = mantissa ? NAN : INFINITY;
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -24);
  } else {
    v = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  return (h & 0x8000) ? -v : v;
}

uint16_t BenchFloatToBfloat16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t b = x >> 16;
  const uint32_t rest = x & 0xFFFFu;
  if (rest > 0x8000u || (rest == 0x8000u && (b & 1u))) ++b;
  return static_cast<uint16_t>(b);
}

float BenchBfloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// ---- Data patterns ----------------------------------------------------------------------------
// Every input is a small integer, exact in every dtype, and chosen per op so that the result
// over any number of ranks (up to ~60 for float16 products, 128 for bfloat16 sums) is exact too,
// whatever order an algorithm combines the ranks in:
//   sum/avg  in [-2, 2]  (|partial sums| <= 2 * nranks)
//   prod     in {±1, ±2} with 2 on about one rank in five (|partial products| <= the final one)
//   max/min  in [-5, 5]
// Unsigned types store the same values modulo 2^bits, and the expected results follow braid's
// unsigned semantics (wrapping sums and products, unsigned max/min).

namespace {

int64_t ReduceInput(braidRedOp_t op, int rank, size_t i, uint64_t seed) {
  const uint64_t k = i + seed * 7919;
  const uint64_t r = static_cast<uint64_t>(rank);
  switch (op) {
    case braidProd: {
      const int64_t magnitude = ((k + r) % 5 == 0) ? 2 : 1;
      return ((k * 3 + r) % 7 == 0) ? -magnitude : magnitude;
    }
    case braidMax:
    case braidMin: return static_cast<int64_t>((k * 7 + r * 13) % 11) - 5;
    default: return static_cast<int64_t>((k * 7 + r * 13) % 5) - 2;
  }
}

int64_t RankValue(int rank, size_t i, uint64_t seed) {
  return static_cast<int64_t>((i + seed * 131 + static_cast<uint64_t>(rank) * 17) % 97);
}

// Stores the small integer (or exact double) v as element i of buf.
void StoreValue(braidDataType_t type, void* buf, size_t i, double v) {
  char* p = static_cast<char*>(buf) + i * TypeSize(type);
  switch (type) {
    case braidInt8: case braidUint8: case braidInt32: case braidUint32: case braidInt64:
    case braidUint64: {
      const uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(v));  // modulo 2^64
      std::memcpy(p, &bits, TypeSize(type));  // little-endian: the low bytes, modulo 2^bits
      break;
    }
    case braidFloat16: {
      const uint16_t h = BenchFloatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case braidBfloat16: {
      const uint16_t b = BenchFloatToBfloat16(static_cast<float>(v));
      std::memcpy(p, &b, 2);
      break;
    }
    case braidFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case braidFloat64: std::memcpy(p, &v, 8); break;
    default: break;
  }
}

double LoadFloating(braidDataType_t type, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf) + i * TypeSize(type);
  switch (type) {
    case braidFloat16: { uint16_t h; std::memcpy(&h, p, 2); return BenchHalfToFloat(h); }
    case braidBfloat16: { uint16_t b; std::memcpy(&b, p, 2); return BenchBfloat16ToFloat(b); }
    case braidFloat32: { float f; std::memcpy(&f, p, 4); return f; }
    case braidFloat64: { double d; std::memcpy(&d, p, 8); return d; }
    default: return 0;
  }
}

template <typename T>
void ExpectedInteger(braidRedOp_t op, int nranks, uint64_t seed, void* buf, size_t count) {
  using U = std::make_unsigned_t<T>;
  T* out = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) {
    U acc = static_cast<U>(ReduceInput(op, 0, i, seed));
    for (int r = 1; r < nranks; ++r) {
      const U v = static_cast<U>(ReduceInput(op, r, i, seed));
      switch (op) {
        case braidSum: case braidAvg: acc = static_cast<U>(acc + v); break;
        case braidProd: acc = static_cast<U>(acc * v); break;
        case braidMax: acc = static_cast<T>(v) > static_cast<T>(acc) ? v : acc; break;
        case braidMin: acc = static_cast<T>(v) < static_cast<T>(acc) ? v : acc; break;
        default: break;
      }
    }
    T result = static_cast<T>(acc);
    if (op == braidAvg) {
      using C = std::common_type_t<T, int>;  // C++ division truncates toward zero
      result = static_cast<T>(static_cast<C>(result) / static_cast<C>(nranks));
    }
    out[i] = result;
  }
}

}  // namespace

void FillReduceInput(braidDataType_t type, braidRedOp_t op, int rank, uint64_t seed, void* buf,
                     size_t count) {
  for (size_t i = 0; i < count; ++i) {
    StoreValue(type, buf, i, static_cast<double>(ReduceInput(op, rank, i, seed)));
  }
}

void FillReduceExpected(braidDataType_t type, braidRedOp_t op, int nranks, uint64_t seed,
                        void* buf, size_t count) {
  switch (type) {
    case braidInt8: return ExpectedInteger<int8_t>(op, nranks, seed, buf, count);
    case braidUint8: return ExpectedInteger<uint8_t>(op, nranks, seed, buf, count);
    case braidInt32: return ExpectedInteger<int32_t>(op, nranks, seed, buf, count);
    case braidUint32: return ExpectedInteger<uint32_t>(op, nranks, seed, buf, count);
    case braidInt64: return ExpectedInteger<int64_t>(op, nranks, seed, buf, count);
    case braidUint64: return ExpectedInteger<uint64_t>(op, nranks, seed, buf, count);
    default: break;
  }
  // Floating types: the exact result in double (all values are small integers), rounded once.
  for (size_t i = 0; i < count; ++i) {
    double acc = static_cast<double>(ReduceInput(op, 0, i, seed));
    for (int r = 1; r < nranks; ++r) {
      const double v = static_cast<double>(ReduceInput(op, r, i, seed));
      switch (op) {
        case braidSum: case braidAvg: acc += v; break;
        case braidProd: acc *= v; break;
        case braidMax: acc = std::max(acc, v); break;
        case braidMin: acc = std::min(acc, v); break;
        default: break;
      }
    }
    if (op == braidAvg) {
      // Divide in the type's own precision (float16/bfloat16 divide in float, then round).
      acc = (type == braidFloat64) ? acc / nranks
                                   : static_cast<double>(static_cast<float>(acc) /
                                                         static_cast<float>(nranks));
    }
    StoreValue(type, buf, i, acc);
  }
}

void FillRankData(braidDataType_t type, int rank, uint64_t seed, void* buf, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    StoreValue(type, buf, i, static_cast<double>(RankValue(rank, i, seed)));
  }
}

int64_t CountWrong(braidDataType_t type, braidRedOp_t op, const void* got, const void* expected,
                   size_t count) {
  const size_t size = TypeSize(type);
  int64_t wrong = 0;
  if (!IsFloatingType(type)) {
    const char* g = static_cast<const char*>(got);
    const char* e = static_cast<const char*>(expected);
    for (size_t i = 0; i < count; ++i) wrong += std::memcmp(g + i * size, e + i * size, size) != 0;
    return wrong;
  }
  const int mantissa_bits = type == braidFloat16 ? 10 : type == braidBfloat16 ? 7
                          : type == braidFloat32 ? 23 : 52;
  for (size_t i = 0; i < count; ++i) {
    const double g = LoadFloating(type, got, i);
    const double e = LoadFloating(type, expected, i);
    if (g == e || (std::isnan(g) && std::isnan(e))) continue;
    if (op == braidAvg && std::isfinite(e) && e != 0) {
      int exponent;
      std::frexp(e, &exponent);  // |e| in [2^(exponent-1), 2^exponent)
      const double ulp = std::ldexp(1.0, exponent - 1 - mantissa_bits);
      if (std::fabs(g - e) <= 2 * ulp) continue;
    }
    ++wrong;
  }
  return wrong;
}

// ---- Output formatting ------------------------------------------------------------------------

std::string FormatFloat(double value, int width) {
  if (!std::isfinite(value)) return Printf("%*g", width, value);
  int power = 0;
  for (uint64_t v = 1; value >= static_cast<double>(v) && power < 20; v *= 10) power++;
  if (power < width - 2) return Printf("%*.2f", width, value);
  if (power < width - 1) return Printf("%*.1f", width, value);
  if (power < width + 1) return Printf("%*.0f", width, value);
  if (width >= 7) return Printf("%*.1e", width, value);
  return Printf("%*.0e", width, value);
}

std::string FormatDeviceLine(int rank, int pid, const char* hostname) {
  return Printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] host memory\n", rank, 0,
                pid, hostname, -1);
}

std::string FormatTableHeader() {
  std::string s = Printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                         "in-place          \n", "", "", "", "", "");
  s += Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n", "size",
              "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
              "algbw", "busbw", "#wrong", "");
  s += Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
              "(GB/s)", "", "");
  return s;
}

std::string FormatRowPrefix(size_t bytes, size_t count, const char* type, const char* op,
                            int root) {
  return Printf("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, op, root);
}

std::string FormatRowBody(double time_us, double algbw, double busbw, int64_t wrong) {
  const std::string t = FormatFloat(time_us, 7);
  const std::string a = FormatFloat(algbw, 6);
  const std::string b = FormatFloat(busbw, 6);
  if (wrong < 0) return Printf("  %7s  %6s  %6s    N/A", t.c_str(), a.c_str(), b.c_str());
  return Printf("  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(),
                static_cast<double>(wrong));
}

// ---- The driver -------------------------------------------------------------------------------

namespace {

// Thrown after a failed braid call has been reported; PerfMain aborts the communicator.
struct BraidFailure {};

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

class Runner {
 public:
  Runner(const PerfOptions& options, const Collective& collective, const char* program)
      : opt_(options), coll_(collective), program_(program) {}

  ~Runner() {
    if (comm_ != nullptr) braidCommAbort(comm_);  // only reached on failure paths
  }

  int Main() {
    Init();
    if (coll_.Rooted() && opt_.root >= nranks_) {
      if (rank_ == 0) {
        std::fprintf(stderr, "%s: invalid value '%d' for -r: the root must be < %d ranks\n",
                     program_, opt_.root, nranks_);
      }
      Destroy();
      return 2;
    }
    AllocateBuffers();
    PrintPreamble();
    PrintDevices();
    if (rank_ == 0) std::printf("#\n%s", FormatTableHeader().c_str());
    Flush();

    const std::vector<braidRedOp_t> ops =
        coll_.Reduces() ? opt_.ops : std::vector<braidRedOp_t>{braidSum};
    for (braidDataType_t type : opt_.types) {
      for (braidRedOp_t op : ops) TimeTest(type, op);
    }

    if (rank_ == 0) {
      const double avg_busbw = bw_count_ > 0 ? bw_sum_ / bw_count_ : 0;
      std::printf("# %-20s : %d %s\n", "Out of bounds values", errors_, errors_ ? "FAILED" : "OK");
      std::printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg_busbw, "");
      std::printf("#\n# Collective test concluded: %s\n#\n\n", coll_.Name());
    }
    Flush();
    Destroy();
    return errors_ ? 1 : 0;
  }

 private:
  void Check(braidResult_t result, const char* what) {
    if (result == braidSuccess) return;
    std::fprintf(stderr, "%s: rank %d: %s failed: %s: %s\n", program_, rank_, what,
                 braidGetErrorString(result), braidGetLastError(comm_));
    std::fflush(stderr);
    throw BraidFailure{};
  }

  void Init() {
    const char* env_rank = std::getenv("RANK");
    if (env_rank == nullptr) env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    braidResult_t result = braidCommInitEnv(&comm_, nullptr);
    if (result != braidSuccess) {
      std::fprintf(stderr, "%s: rank %s: braidCommInitEnv failed: %s: %s\n", program_,
                   env_rank ? env_rank : "?", braidGetErrorString(result),
                   braidGetLastError(nullptr));
      comm_ = nullptr;
      throw BraidFailure{};
    }
    Check(braidCommUserRank(comm_, &rank_), "braidCommUserRank");
    Check(braidCommCount(comm_, &nranks_), "braidCommCount");
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

  // Bytes the send / recv buffers need for every type of the sweep at max_bytes, in place too.
  void AllocateBuffers() {
    size_t send = 0, recv = 0;
    for (braidDataType_t type : opt_.types) {
      const size_t elem = TypeSize(type);
      const CollSizes s = coll_.Sizes(opt_.max_bytes / elem, nranks_);
      const size_t r = static_cast<size_t>(rank_);
      send = std::max(send, s.send_count * elem);
      recv = std::max({recv, s.recv_count * elem,
                       (s.recv_inplace_offset * r + s.recv_count) * elem,
                       (s.send_inplace_offset * r + s.send_count) * elem});
    }
    send_ = AllocateHost(send);
    recv_ = AllocateHost(recv);
    expected_ = AllocateHost(recv);
    if (!send_ || !recv_ || !expected_) {
      std::fprintf(stderr, "%s: rank %d: cannot allocate %zu + 2 x %zu bytes of host memory\n",
                   program_, rank_, send, recv);
      throw BraidFailure{};
    }
  }

  void PrintPreamble() {
    if (rank_ != 0) return;
    int version = 0;
    Check(braidGetVersion(&version), "braidGetVersion");
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
  }

  // One line per rank, gathered to rank 0 with braidAllGather; where the communicator has no
  // allgather yet (braidInvalidUsage), rank 0 prints its own line only.
  void PrintDevices() {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
    if (char* dot = std::strchr(host, '.')) *dot = '\0';  // as nccl-tests: no domain
    constexpr size_t kLine = 256;
    char line[kLine] = {0};
    std::snprintf(line, kLine, "%s", FormatDeviceLine(rank_, static_cast<int>(getpid()), host).c_str());
    std::vector<char> all(kLine * static_cast<size_t>(nranks_));
    const braidResult_t result =
        braidAllGather(line, all.data(), kLine, braidInt8, comm_, nullptr);
    if (result == braidInvalidUsage) {
      all.assign(line, line + kLine);
    } else {
      Check(result, "braidAllGather (device lines)");
    }
    if (rank_ == 0) {
      std::printf("# Using devices\n");
      for (size_t i = 0; i * kLine < all.size(); ++i) {
        all[i * kLine + kLine - 1] = '\0';
        std::printf("%s", &all[i * kLine]);
      }
    }
  }

  // braidBarrier, or a one-element allreduce where the communicator has no barrier yet.
  void Barrier() {
    if (!barrier_missing_) {
      const braidResult_t result = braidBarrier(comm_, nullptr);
      if (result != braidInvalidUsage) return Check(result, "braidBarrier");
      barrier_missing_ = true;
    }
    int32_t token = 0;
    Check(braidAllReduce(&token, &token, 1, braidInt32, braidSum, comm_, nullptr),
          "braidAllReduce (barrier)");
  }

  // Combines this rank's seconds per iteration across ranks as -a asks.
  double CombineTime(double seconds) {
    braidRedOp_t op = braidSum;
    if (opt_.average == 0 && rank_ != 0) seconds = 0;  // rank 0's time, sent to everyone
    if (opt_.average == 2) op = braidMin;
    if (opt_.average == 3) op = braidMax;
    Check(braidAllReduce(&seconds, &seconds, 1, braidFloat64, op, comm_, nullptr),
          "braidAllReduce (time)");
    return opt_.average == 1 ? seconds / nranks_ : seconds;
  }

  void Pointers(const CollSizes& s, braidDataType_t type, bool in_place, char** send,
                char** recv) {
    const size_t elem = TypeSize(type);
    const size_t r = static_cast<size_t>(rank_);
    if (in_place) {
      *send = recv_.get() + s.send_inplace_offset * r * elem;
      *recv = recv_.get() + s.recv_inplace_offset * r * elem;
    } else {
      *send = send_.get();
      *recv = recv_.get();
    }
  }

  void RunOnce(const CollSizes& s, braidDataType_t type, braidRedOp_t op, bool in_place) {
    char* send;
    char* recv;
    Pointers(s, type, in_place, &send, &recv);
    Check(coll_.Run(send, recv, s, type, op, opt_.root, comm_), coll_.CallName());
  }

  // Fills the send data (for in-place runs, inside recvbuff) over a poisoned recvbuff, and the
  // expected result.
  void InitData(const CollSizes& s, braidDataType_t type, braidRedOp_t op, bool in_place,
                uint64_t seed) {
    const size_t elem = TypeSize(type);
    char* send;
    char* recv;
    Pointers(s, type, in_place, &send, &recv);
    size_t poison = static_cast<size_t>(recv - recv_.get()) + s.recv_count * elem;
    if (in_place) poison = std::max(poison, static_cast<size_t>(send - recv_.get()) + s.send_count * elem);
    std::memset(recv_.get(), 0xA5, poison);  // a collective that writes nothing cannot pass
    DataArgs args{type, op, opt_.root, rank_, nranks_, seed, &s, send, expected_.get()};
    coll_.InitData(args);
  }

  void BenchTime(const CollSizes& s, braidDataType_t type, braidRedOp_t op, bool in_place) {
    const size_t elem = TypeSize(type);
    if (opt_.check > 0) InitData(s, type, op, in_place, 0);
    RunOnce(s, type, op, in_place);
    Barrier();

    const auto start = std::chrono::steady_clock::now();
    for (int iter = 0; iter < opt_.iters; ++iter) {
      for (int a = 0; a < opt_.agg_iters; ++a) {
        RunOnce(s, type, op, in_place);
        if (opt_.blocking == 1) Barrier();
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double seconds = CombineTime(elapsed / (static_cast<double>(opt_.iters) * opt_.agg_iters));
    const double algbw = seconds > 0 ? static_cast<double>(s.param_count * elem) / 1e9 / seconds : 0;
    const double busbw = algbw * coll_.BusBandwidthFactor(nranks_);
    Barrier();

    int64_t wrong = opt_.check > 0 ? 0 : -1;
    for (int c = 0; c < opt_.check; ++c) {
      InitData(s, type, op, in_place, ++check_rep_);
      RunOnce(s, type, op, in_place);
      char* send;
      char* recv;
      Pointers(s, type, in_place, &send, &recv);
      wrong = CountWrong(type, op, recv, expected_.get(), s.recv_count);
      Check(braidAllReduce(&wrong, &wrong, 1, braidInt64, braidSum, comm_, nullptr),
            "braidAllReduce (#wrong)");
      if (wrong != 0) break;
    }
    if (wrong > 0) ++errors_;
    if (rank_ == 0) std::printf("%s", FormatRowBody(seconds * 1e6, algbw, busbw, wrong).c_str());
    bw_sum_ += busbw;
    ++bw_count_;
  }

  void TimeTest(braidDataType_t type, braidRedOp_t op) {
    const size_t elem = TypeSize(type);
    const char* op_name = coll_.Reduces() ? OpName(op) : "none";
    const int root = coll_.Rooted() ? opt_.root : -1;
    // Warm up at the largest and the smallest size, as nccl-tests does.
    for (size_t bytes : {opt_.max_bytes, opt_.min_bytes}) {
      const CollSizes s = coll_.Sizes(bytes / elem, nranks_);
      for (int w = 0; w < opt_.warmup_iters; ++w) RunOnce(s, type, op, false);
    }
    for (size_t bytes = opt_.min_bytes; bytes <= opt_.max_bytes;) {
      const CollSizes s = coll_.Sizes(bytes / elem, nranks_);
      if (rank_ == 0) {
        const size_t row_bytes = std::max(s.send_count, s.recv_count) * elem;
        std::printf("%s", FormatRowPrefix(row_bytes, s.param_count, TypeName(type), op_name, root)
                              .c_str());
      }
      BenchTime(s, type, op, false);
      BenchTime(s, type, op, true);
      if (rank_ == 0) std::printf("\n");
      Flush();
      if (opt_.step_factor > 1) {
        if (bytes > SIZE_MAX / opt_.step_factor) break;
        bytes *= opt_.step_factor;
      } else {
        if (bytes > SIZE_MAX - opt_.step_bytes) break;
        bytes += opt_.step_bytes;
      }
    }
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
  try {
    Runner runner(options, collective, program);
    return runner.Main();
  } catch (const BraidFailure&) {
    return 3;  // reported where it happened; ~Runner aborted the communicator
  }
}

}  // namespace braid::bench
