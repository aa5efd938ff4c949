#include "bench/perf_common.h"

#include <fcntl.h>
#include <getopt.h>
#include <strings.h>
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
#include <ctime>
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
      "\t[-J,--output_file <file.json> also write the results as JSON (nccl-tests' format)]\n"
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
      {"output_file", required_argument, nullptr, 'J'},
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
  while ((c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:c:o:d:r:z:a:J:p:y:T:G:C:R:u:N:x:h", kLong,
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
      case 'J': {
        // nccl-tests infers the format from the suffix and silently writes nothing for any
        // other; here that is an error, so a typo does not lose a run's results.
        const size_t n = std::strlen(v);
        if (n < 6 || strcasecmp(v + n - 5, ".json") != 0) {
          return bad('J', v, "a file name ending in .json (the only output format)");
        }
        o->json_path = v;
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
// Which value an element gets comes from a hash of (element, seed), so the data has no period:
// a block reduced or delivered at the wrong offset mismatches. Unsigned types store the same
// values modulo 2^bits, and the expected results follow braid's unsigned semantics (wrapping
// sums and products, unsigned max/min).
//
// Speed matters here: at 16 MiB x 4 ranks on two cores, filling and checking must not cost more
// than the collective. So each fill is one typed loop, small values convert through a table,
// and CountWrong compares whole buffers before it looks at elements.

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element i's key for a given seed (and stream, for rank and block data): 40 random bits.
uint64_t ElementKey(uint64_t salt, size_t i) { return Mix(salt ^ static_cast<uint64_t>(i)) >> 24; }
uint64_t Salt(uint64_t stream, uint64_t seed) { return Mix(stream * 0x100000001B3ull ^ Mix(seed)); }

// A reduction input depends on the element only through its class, k mod 5 (sum, avg),
// k mod 11 (max, min) or (k mod 5, (k >> 8) mod 7) (prod): results are computed once per class
// and copied per element.
int NumClasses(braidRedOp_t op) {
  return op == braidProd ? 35 : (op == braidMax || op == braidMin) ? 11 : 5;
}
size_t ClassOf(braidRedOp_t op, uint64_t k) {
  switch (op) {
    case braidProd: return static_cast<size_t>((k % 5) * 7 + (k >> 8) % 7);
    case braidMax:
    case braidMin: return static_cast<size_t>(k % 11);
    default: return static_cast<size_t>(k % 5);
  }
}
int64_t ReduceInputForClass(braidRedOp_t op, int rank, size_t cls) {
  const uint64_t r = static_cast<uint64_t>(rank);
  switch (op) {
    case braidProd: {
      const int64_t magnitude = ((cls / 7 + r) % 5 == 0) ? 2 : 1;
      return (((cls % 7) * 3 + r) % 7 == 0) ? -magnitude : magnitude;
    }
    case braidMax:
    case braidMin: return static_cast<int64_t>((cls * 7 + r * 13) % 11) - 5;
    default: return static_cast<int64_t>((cls * 7 + r * 13) % 5) - 2;
  }
}

constexpr uint64_t kReduceStream = 0xB4A1D;

// Converts small integers (and any double) to element bytes; |v| < kTable goes through a table.
class Storer {
 public:
  explicit Storer(braidDataType_t type) : type_(type) {
    if (type == braidFloat16 || type == braidBfloat16) {
      for (int v = -kTable; v < kTable; ++v) {
        table_[v + kTable] = type == braidFloat16 ? BenchFloatToHalf(static_cast<float>(v))
                                                  : BenchFloatToBfloat16(static_cast<float>(v));
      }
    }
  }
  // Stores count values value(i) into buf, in one loop per type.
  template <typename F>
  void Fill(void* buf, size_t count, F value) const {
    switch (type_) {
      case braidInt8: case braidUint8: return Ints<uint8_t>(buf, count, value);
      case braidInt32: case braidUint32: return Ints<uint32_t>(buf, count, value);
      case braidInt64: case braidUint64: return Ints<uint64_t>(buf, count, value);
      case braidFloat32: {
        float* p = static_cast<float*>(buf);
        for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(value(i));
        return;
      }
      case braidFloat64: {
        double* p = static_cast<double*>(buf);
        for (size_t i = 0; i < count; ++i) p[i] = static_cast<double>(value(i));
        return;
      }
      case braidFloat16: case braidBfloat16: {
        uint16_t* p = static_cast<uint16_t*>(buf);
        for (size_t i = 0; i < count; ++i) p[i] = Half(static_cast<double>(value(i)));
        return;
      }
      default: return;
    }
  }

 private:
  static constexpr int kTable = 4096;
  template <typename U, typename F>
  static void Ints(void* buf, size_t count, F value) {
    U* p = static_cast<U*>(buf);  // two's complement: the low bits, modulo 2^bits
    for (size_t i = 0; i < count; ++i) {
      p[i] = static_cast<U>(static_cast<uint64_t>(static_cast<int64_t>(value(i))));
    }
  }
  uint16_t Half(double v) const {
    if (v > -kTable && v < kTable && v == std::floor(v)) {
      return table_[static_cast<int>(v) + kTable];
    }
    const float f = static_cast<float>(v);
    return type_ == braidFloat16 ? BenchFloatToHalf(f) : BenchFloatToBfloat16(f);
  }
  braidDataType_t type_;
  uint16_t table_[2 * kTable] = {};
};

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

// Expected result of each class (buf: NumClasses(op) elements).
template <typename T>
void ExpectedIntegerClasses(braidRedOp_t op, int nranks, void* buf) {
  using U = std::make_unsigned_t<T>;
  T* out = static_cast<T*>(buf);
  for (int c = 0; c < NumClasses(op); ++c) {
    const size_t cls = static_cast<size_t>(c);
    U acc = static_cast<U>(ReduceInputForClass(op, 0, cls));
    for (int r = 1; r < nranks; ++r) {
      const U v = static_cast<U>(ReduceInputForClass(op, r, cls));
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
    out[cls] = result;
  }
}

// Element j of buf = class ClassOf(op, key(first + j)) of table.
template <typename E>
void CopyClasses(braidRedOp_t op, uint64_t salt, const char* table, void* buf, size_t count,
                 size_t first) {
  const E* t = reinterpret_cast<const E*>(table);
  E* out = static_cast<E*>(buf);
  for (size_t j = 0; j < count; ++j) out[j] = t[ClassOf(op, ElementKey(salt, first + j))];
}

void FillFromClasses(braidDataType_t type, braidRedOp_t op, uint64_t seed, const char* table,
                     void* buf, size_t count, size_t first) {
  const uint64_t salt = Salt(kReduceStream, seed);
  switch (TypeSize(type)) {
    case 1: return CopyClasses<uint8_t>(op, salt, table, buf, count, first);
    case 2: return CopyClasses<uint16_t>(op, salt, table, buf, count, first);
    case 4: return CopyClasses<uint32_t>(op, salt, table, buf, count, first);
    case 8: return CopyClasses<uint64_t>(op, salt, table, buf, count, first);
    default: return;
  }
}

}  // namespace

void FillReduceInput(braidDataType_t type, braidRedOp_t op, int rank, uint64_t seed, void* buf,
                     size_t count) {
  char table[35 * 8];
  Storer(type).Fill(table, static_cast<size_t>(NumClasses(op)),
                    [&](size_t cls) { return ReduceInputForClass(op, rank, cls); });
  FillFromClasses(type, op, seed, table, buf, count, 0);
}

void FillReduceExpected(braidDataType_t type, braidRedOp_t op, int nranks, uint64_t seed,
                        void* buf, size_t count, size_t first) {
  char table[35 * 8];
  switch (type) {
    case braidInt8: ExpectedIntegerClasses<int8_t>(op, nranks, table); break;
    case braidUint8: ExpectedIntegerClasses<uint8_t>(op, nranks, table); break;
    case braidInt32: ExpectedIntegerClasses<int32_t>(op, nranks, table); break;
    case braidUint32: ExpectedIntegerClasses<uint32_t>(op, nranks, table); break;
    case braidInt64: ExpectedIntegerClasses<int64_t>(op, nranks, table); break;
    case braidUint64: ExpectedIntegerClasses<uint64_t>(op, nranks, table); break;
    default:
      // Floating types: the exact result in double (all values are small integers), rounded
      // once.
      Storer(type).Fill(table, static_cast<size_t>(NumClasses(op)), [&](size_t cls) {
        double acc = static_cast<double>(ReduceInputForClass(op, 0, cls));
        for (int r = 1; r < nranks; ++r) {
          const double v = static_cast<double>(ReduceInputForClass(op, r, cls));
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
        return acc;
      });
  }
  FillFromClasses(type, op, seed, table, buf, count, first);
}

// A small integer in [0, 97) per element, from a hash of (stream, i, seed): no period, so a
// block in the wrong place or shifted by any offset mismatches (all but about 1 element in 97).
void FillRankData(braidDataType_t type, int rank, uint64_t seed, void* buf, size_t count) {
  const uint64_t salt = Salt(static_cast<uint32_t>(rank), seed);
  Storer(type).Fill(buf, count,
                    [&](size_t i) { return static_cast<int64_t>(ElementKey(salt, i) % 97); });
}

void FillBlockData(braidDataType_t type, int src, int dst, uint64_t seed, void* buf,
                   size_t count) {
  // Streams 2^32 and up: distinct from FillRankData's.
  const uint64_t stream = (uint64_t{1} << 32) |
                          (static_cast<uint64_t>(static_cast<uint16_t>(src)) << 16) |
                          static_cast<uint16_t>(dst);
  const uint64_t salt = Salt(stream, seed);
  Storer(type).Fill(buf, count,
                    [&](size_t i) { return static_cast<int64_t>(ElementKey(salt, i) % 97); });
}

namespace {

int64_t CountWrongElements(braidDataType_t type, braidRedOp_t op, const void* got,
                           const void* expected, size_t count) {
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

}  // namespace

int64_t CountWrong(braidDataType_t type, braidRedOp_t op, const void* got, const void* expected,
                   size_t count) {
  const size_t size = TypeSize(type);
  // The common case, all equal (bit for bit), at memcmp speed; elements only where it fails.
  constexpr size_t kBlock = 4096;
  int64_t wrong = 0;
  const char* g = static_cast<const char*>(got);
  const char* e = static_cast<const char*>(expected);
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    if (std::memcmp(g + start * size, e + start * size, n * size) == 0) continue;
    wrong += CountWrongElements(type, op, g + start * size, e + start * size, n);
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

// ---- Buffers of one row -----------------------------------------------------------------------

void BufferBytes(const CollSizes& s, size_t elem, int rank, size_t* send_bytes,
                 size_t* recv_bytes) {
  const size_t r = static_cast<size_t>(rank);
  *send_bytes = s.send_count * elem;
  *recv_bytes = std::max({s.recv_count * elem, (s.recv_inplace_offset * r + s.recv_count) * elem,
                          (s.send_inplace_offset * r + s.send_count) * elem});
}

RankBuffers PrepareRank(const Collective& collective, const CollSizes& s, braidDataType_t type,
                        braidRedOp_t op, int root, int rank, int nranks, uint64_t seed,
                        bool in_place, char* send, char* recv, void* expected) {
  const size_t elem = TypeSize(type);
  const size_t r = static_cast<size_t>(rank);
  RankBuffers b{send, recv};
  if (in_place) {
    b.send = recv + s.send_inplace_offset * r * elem;
    b.recv = recv + s.recv_inplace_offset * r * elem;
  }
  size_t send_bytes, recv_bytes;
  BufferBytes(s, elem, rank, &send_bytes, &recv_bytes);
  // Poison all of recv the row can touch: a collective that writes nothing cannot pass, and
  // stale data from the previous row cannot pass for this one's.
  std::memset(recv, 0xA5, in_place ? recv_bytes : s.recv_count * elem);
  DataArgs args{type, op, root, rank, nranks, seed, &s, b.send, b.recv, expected};
  collective.InitData(args);
  return b;
}

// ---- JSON report ------------------------------------------------------------------------------

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '/': out += "\\/"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F) {
          out += c;
        }
    }
  }
  return out + "\"";
}

bool KeepEnvEntry(const char* entry) {
  static const char* const kLaunch[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
                                        "MASTER_ADDR=", "MASTER_PORT=", "SLURM_PROCID=",
                                        "SLURM_NTASKS=", "OMPI_COMM_WORLD_RANK=",
                                        "OMPI_COMM_WORLD_SIZE="};
  for (const char* prefix : kLaunch) {
    if (std::strncmp(entry, prefix, std::strlen(prefix)) == 0) return true;
  }
  if (std::strncmp(entry, "BRAID_", 6) != 0) return false;
  // Secrets stay out of reports people paste around.
  return std::strncmp(entry, "BRAID_SECRET=", 13) != 0 && std::strstr(entry, "TOKEN") == nullptr &&
         std::strstr(entry, "PASSWORD") == nullptr;
}

namespace {

std::string JsonDouble(double v) {
  if (std::isnan(v)) return "\"nan\"";  // as nccl-tests; inf is not JSON either
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  return Printf("%.9g", v);  // nccl-tests' %f keeps 6 decimals: 2 digits of a small algbw
}

std::string JsonBool(bool v) { return v ? "\"true\"" : "\"false\""; }

std::string JsonHalf(const JsonResult& r) {
  return Printf("{\"time\":%s,\"alg_bw\":%s,\"bus_bw\":%s,\"nwrong\":%s}",
                JsonDouble(r.time_us).c_str(), JsonDouble(r.algbw).c_str(),
                JsonDouble(r.busbw).c_str(),
                r.wrong < 0 ? "null" : JsonDouble(static_cast<double>(r.wrong)).c_str());
}

std::string JsonList(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? "," : "") + JsonString(items[i]);
  return s + "]";
}

}  // namespace

std::string FormatJson(const JsonReport& r) {
  const PerfOptions& o = r.options;
  std::string s = "{";
  s += Printf("\"version\":2,\"start_time\":%s,", JsonString(r.start_time).c_str());
  s += "\"args\":" + JsonList(r.args) + ",";
  s += "\"env\":" + JsonList(r.env) + ",";
  s += Printf("\"braid_version\":%d,\"collective\":%s,\"nranks\":%d,\n", r.braid_version,
              JsonString(r.collective).c_str(), r.nranks);
  s += Printf("\"config\":{\"nthreads\":%d,\"ngpus\":%d,\"minimum_bytes\":%zu,"
              "\"maximum_bytes\":%zu,",
              o.nthreads, o.ngpus, o.min_bytes, o.max_bytes);
  if (o.step_factor > 1) {
    s += Printf("\"step_factor\":%zu,", o.step_factor);
  } else {
    s += Printf("\"step_bytes\":%zu,", o.step_bytes);
  }
  s += Printf("\"warmup_iters\":%d,\"iterations\":%d,\"aggregated_iterations\":%d,"
              "\"validation\":%d,\"graph\":0,\"blocking_collectives\":%s,"
              "\"per_iter_timing\":\"false\",\"parallel_init\":\"false\",\"average\":%d,",
              o.warmup_iters, o.iters, o.agg_iters, o.check, JsonBool(o.blocking != 0).c_str(),
              o.average);
  s += "\"devices\":[";
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const JsonDevice& d = r.devices[i];
    s += Printf("%s{\"rank\":%d,\"group\":0,\"pid\":%d,\"hostname\":%s,\"device\":-1,"
                "\"device_hex\":\"cpu\",\"device_info\":\"host memory\"}",
                i ? "," : "", d.rank, d.pid, JsonString(d.hostname).c_str());
  }
  s += "]},\n\"results\":[";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const JsonRow& row = r.rows[i];
    s += Printf("%s\n{\"size\":%zu,\"count\":%zu,\"type\":%s,\"redop\":%s,\"root\":\"%6i\","
                "\"out_of_place\":%s,\"in_place\":%s,\"actual_iterations\":%d,"
                "\"experiment_name\":\"\"}",
                i ? "," : "", row.bytes, row.count, JsonString(row.type).c_str(),
                JsonString(row.redop).c_str(), row.root, JsonHalf(row.out_of_place).c_str(),
                JsonHalf(row.in_place).c_str(), row.iterations);
  }
  s += "],\n";
  s += Printf("\"out_of_bounds\":{\"count\":%d,\"okay\":%s},", r.errors,
              JsonBool(r.errors == 0).c_str());
  s += Printf("\"average_bus_bandwidth\":{\"bandwidth\":%s,\"okay\":\"unchecked\"},",
              JsonDouble(r.avg_busbw).c_str());
  s += "\"errors\":" + JsonList(r.messages) + ",";
  s += Printf("\"end_time\":%s}\n", JsonString(r.end_time).c_str());
  return s;
}

FILE* OpenJsonFile(const std::string& path, std::string* opened) {
  std::string attempt = path;
  for (int i = 0; i < 1000; ++i) {
    const int fd = open(attempt.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      *opened = attempt;
      return fdopen(fd, "w");
    }
    if (errno != EEXIST) break;
    attempt = path + "." + std::to_string(i);
  }
  opened->clear();
  return nullptr;
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

std::string Now() {
  char buf[64];
  const time_t now = time(nullptr);
  struct tm tm_now;
  localtime_r(&now, &tm_now);
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm_now);
  return buf;
}

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
    OpenJson();
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
    return errors_ ? 1 : 0;
  }

  // After a failure: the rows so far and the error, if -J asked for a report.
  void WriteJsonAfterFailure() {
    if (json_file_ == nullptr) return;
    if (!last_error_.empty()) json_.messages.push_back(last_error_);
    WriteJson();
  }

 private:
  void Check(braidResult_t result, const char* what) {
    if (result == braidSuccess) return;
    last_error_ = Printf("rank %d: %s failed: %s: %s", rank_, what, braidGetErrorString(result),
                         braidGetLastError(comm_));
    std::fprintf(stderr, "%s: %s\n", program_, last_error_.c_str());
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
    json_.nranks = nranks_;
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
  void AllocateBuffers() {
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
      throw BraidFailure{};
    }
  }

  void PrintPreamble() {
    int version = 0;
    Check(braidGetVersion(&version), "braidGetVersion");
    json_.braid_version = version;
    if (rank_ != 0) return;
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

  // One line per rank, gathered to every rank with a byte-wise allreduce (each rank fills its
  // own slot, zeros elsewhere): allreduce is the one collective the bench always relies on, so
  // the header does not depend on the collective under test.
  void PrintDevices() {
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
    Check(braidAllReduce(all.data(), all.data(), all.size(), braidUint8, braidSum, comm_, nullptr),
          "braidAllReduce (device lines)");
    Check(braidAllReduce(pids.data(), pids.data(), pids.size(), braidInt32, braidSum, comm_,
                         nullptr),
          "braidAllReduce (pids)");
    if (rank_ != 0) return;
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
  }

  // braidBarrier, or a one-element allreduce where the communicator has no barrier algorithm
  // yet (the selector answers braidInvalidArgument, an older build braidInvalidUsage).
  void Barrier() {
    if (!barrier_missing_) {
      const braidResult_t result = braidBarrier(comm_, nullptr);
      if (result == braidSuccess) return;
      if (result != braidInvalidUsage && result != braidInvalidArgument) {
        return Check(result, "braidBarrier");
      }
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

  RankBuffers Pointers(const CollSizes& s, braidDataType_t type, bool in_place) {
    const size_t elem = TypeSize(type);
    const size_t r = static_cast<size_t>(rank_);
    if (!in_place) return RankBuffers{send_.get(), recv_.get()};
    return RankBuffers{recv_.get() + s.send_inplace_offset * r * elem,
                       recv_.get() + s.recv_inplace_offset * r * elem};
  }

  void RunOnce(const CollSizes& s, braidDataType_t type, braidRedOp_t op, bool in_place) {
    const RankBuffers b = Pointers(s, type, in_place);
    Check(coll_.Run(b.send, b.recv, s, type, op, opt_.root, comm_), coll_.CallName());
  }

  JsonResult BenchTime(const CollSizes& s, braidDataType_t type, braidRedOp_t op, bool in_place) {
    const size_t elem = TypeSize(type);
    const int checks = (in_place && !coll_.ChecksInPlace()) ? 0 : opt_.check;
    if (checks > 0) {
      PrepareRank(coll_, s, type, op, opt_.root, rank_, nranks_, 0, in_place, send_.get(),
                  recv_.get(), expected_.get());
    }
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
    const double seconds =
        CombineTime(elapsed / (static_cast<double>(opt_.iters) * opt_.agg_iters));
    const size_t bw_count = s.bw_count != 0 ? s.bw_count : s.param_count;
    const double algbw = seconds > 0 ? static_cast<double>(bw_count * elem) / 1e9 / seconds : 0;
    const double busbw = algbw * coll_.BusBandwidthFactor(nranks_);
    Barrier();

    int64_t wrong = checks > 0 ? 0 : -1;
    for (int c = 0; c < checks; ++c) {
      const RankBuffers b = PrepareRank(coll_, s, type, op, opt_.root, rank_, nranks_,
                                        ++check_rep_, in_place, send_.get(), recv_.get(),
                                        expected_.get());
      RunOnce(s, type, op, in_place);
      wrong = CountWrong(type, op, b.recv, expected_.get(), s.recv_count);
      Check(braidAllReduce(&wrong, &wrong, 1, braidInt64, braidSum, comm_, nullptr),
            "braidAllReduce (#wrong)");
      if (wrong != 0) break;
    }
    if (wrong > 0) ++errors_;
    if (rank_ == 0) std::printf("%s", FormatRowBody(seconds * 1e6, algbw, busbw, wrong).c_str());
    bw_sum_ += busbw;
    ++bw_count_;
    return JsonResult{seconds * 1e6, algbw, busbw, wrong};
  }

  void TimeTest(braidDataType_t type, braidRedOp_t op) {
    const size_t elem = TypeSize(type);
    const char* op_name = coll_.Reduces() ? OpName(op) : "none";
    const int root = coll_.Rooted() ? opt_.root : -1;
    // Warm up at the largest and the smallest size, as nccl-tests does.
    for (size_t bytes : {opt_.max_bytes, opt_.min_bytes}) {
      const CollSizes s = coll_.Sizes(bytes / elem, elem, nranks_);
      for (int w = 0; w < opt_.warmup_iters; ++w) RunOnce(s, type, op, false);
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
      row.out_of_place = BenchTime(s, type, op, false);
      row.in_place = BenchTime(s, type, op, true);
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
  try {
    return runner.Main();
  } catch (const BraidFailure&) {
    std::fflush(stdout);
    runner.WriteJsonAfterFailure();
    return 3;  // reported where it happened; ~Runner aborts the communicator
  }
}

}  // namespace braid::bench
