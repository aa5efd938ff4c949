#include "bench/perf_flags.h"

#include <getopt.h>
#include <strings.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "bench/perf_printf.h"
#include "bench/perf_types.h"

namespace braid::bench {
namespace {

bool ParseInt(const char* text, long min, long max, int* out) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

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
      "\t[--device <host/cuda> where the buffers live (default host); cuda: GPU memory, one\n"
      "\t stream per rank, timed with events on it, as nccl-tests]\n"
      "\t[-h,--help]\n"
      "Ranks come from the environment (braidrun, torchrun: RANK, WORLD_SIZE, MASTER_ADDR,\n"
      "MASTER_PORT; SLURM_*; Open MPI's OMPI_*); buffers are host memory unless --device cuda\n"
      "(each rank's GPU: NCCL_TESTS_DEVICE, else LOCAL_RANK modulo the GPUs present).\n";
  return s;
}

ParseOutcome ParsePerfArgs(int argc, char** argv, PerfOptions* o, std::string* error) {
  // --device has no short form (nccl-tests' letters are all taken or reserved).
  constexpr int kDeviceFlag = 1000;
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
      {"device", required_argument, nullptr, kDeviceFlag},
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
          const braidRedOp_t op = static_cast<braidRedOp_t>(i);
          if (std::strcmp(v, "all") == 0 || std::strcmp(v, OpName(op)) == 0) {
            o->ops.push_back(op);
          }
        }
        if (o->ops.empty()) return bad('o', v, "sum, prod, max, min, avg or all");
        break;
      }
      case 'd': {
        o->types.clear();
        for (int i = 0; i < braidNumTypes; ++i) {
          const braidDataType_t type = static_cast<braidDataType_t>(i);
          if (std::strcmp(v, "all") == 0 || std::strcmp(v, TypeName(type)) == 0) {
            o->types.push_back(type);
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
      case kDeviceFlag:
        if (std::strcmp(v, "host") == 0) {
          o->device_buffers = false;
        } else if (std::strcmp(v, "cuda") == 0) {
          o->device_buffers = true;
        } else {
          return fail(Printf("invalid value '%s' for --device: expected host or cuda", v));
        }
        break;
      case 'h': return ParseOutcome::kHelp;
      case ':': {
        if (optopt == kDeviceFlag) return fail("option --device needs a value (host or cuda)");
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

}  // namespace braid::bench
