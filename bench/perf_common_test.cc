// The bench's flag parsing, table formatting (against nccl-tests' own output in
// shared/anchors/nccl_tests_all_reduce_perf_1rank_h100.txt) and data checks.
#include "bench/perf_common.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace braid::bench {
namespace {

// Runs ParsePerfArgs over {"prog", args...}.
ParseOutcome Parse(std::initializer_list<const char*> args, PerfOptions* options,
                   std::string* error) {
  std::vector<std::string> storage{"all_reduce_perf"};
  for (const char* a : args) storage.emplace_back(a);
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(&s[0]);
  argv.push_back(nullptr);
  return ParsePerfArgs(static_cast<int>(storage.size()), argv.data(), options, error);
}

TEST_CASE("ParseSize understands nccl-tests' sizes", "[bench]") {
  size_t v = 0;
  CHECK((ParseSize("8", &v) && v == 8));
  CHECK((ParseSize("0", &v) && v == 0));
  CHECK((ParseSize("1K", &v) && v == 1024));
  CHECK((ParseSize("1k", &v) && v == 1024));
  CHECK((ParseSize("64M", &v) && v == 64u << 20));
  CHECK((ParseSize("2G", &v) && v == 2ull << 30));
  CHECK((ParseSize("1.5K", &v) && v == 1536));
  CHECK_FALSE(ParseSize("", &v));
  CHECK_FALSE(ParseSize("-1", &v));
  CHECK_FALSE(ParseSize("8X", &v));
  CHECK_FALSE(ParseSize("8KB", &v));
  CHECK_FALSE(ParseSize("K", &v));
  CHECK_FALSE(ParseSize("nan", &v));
}

TEST_CASE("ParsePerfArgs: defaults and the anchor's command line", "[bench]") {
  PerfOptions o;
  std::string error;
  REQUIRE(Parse({}, &o, &error) == ParseOutcome::kRun);
  CHECK(o.min_bytes == 32u << 20);
  CHECK(o.iters == 20);
  CHECK(o.warmup_iters == 1);
  CHECK(o.check == 1);
  CHECK(o.average == 1);
  CHECK(o.ops == std::vector<braidRedOp_t>{braidSum});
  CHECK(o.types == std::vector<braidDataType_t>{braidFloat32});

  PerfOptions p;
  REQUIRE(Parse({"-b", "8", "-e", "64M", "-f", "4", "-n", "5", "-w", "2", "-c", "0", "-a", "3",
                 "-z", "1", "-t", "1", "-g", "1", "-m", "2", "-r", "1"},
                &p, &error) == ParseOutcome::kRun);
  CHECK(p.min_bytes == 8);
  CHECK(p.max_bytes == 64u << 20);
  CHECK(p.step_factor == 4);
  CHECK(p.iters == 5);
  CHECK(p.warmup_iters == 2);
  CHECK(p.check == 0);
  CHECK(p.average == 3);
  CHECK(p.blocking == 1);
  CHECK(p.agg_iters == 2);
  CHECK(p.root == 1);

  PerfOptions q;
  REQUIRE(Parse({"--minbytes", "1K", "--maxbytes=4K", "--stepbytes", "1K", "--op", "all",
                 "--datatype", "all"},
                &q, &error) == ParseOutcome::kRun);
  CHECK(q.min_bytes == 1024);
  CHECK(q.max_bytes == 4096);
  CHECK(q.step_bytes == 1024);
  CHECK(q.ops.size() == 5);
  CHECK(q.types.size() == 10);

  PerfOptions r;
  REQUIRE(Parse({"-o", "avg", "-d", "bfloat16"}, &r, &error) == ParseOutcome::kRun);
  CHECK(r.ops == std::vector<braidRedOp_t>{braidAvg});
  CHECK(r.types == std::vector<braidDataType_t>{braidBfloat16});
  CHECK(Parse({"-h"}, &r, &error) == ParseOutcome::kHelp);
}

TEST_CASE("ParsePerfArgs: bad values name the flag", "[bench]") {
  struct Case {
    std::initializer_list<const char*> args;
    const char* must_mention;
  };
  const Case cases[] = {
      {{"-b", "abc"}, "-b"},
      {{"-e", "1Q"}, "-e"},
      {{"-b", "1M", "-e", "1K"}, "-e"},
      {{"-i", "0"}, "-i"},
      {{"-f", "0"}, "-f"},
      {{"-n", "0"}, "-n"},
      {{"-n", "x"}, "-n"},
      {{"-w", "-1"}, "-w"},
      {{"-c", "yes"}, "-c"},
      {{"-o", "mulsum"}, "-o"},
      {{"-d", "float8"}, "-d"},
      {{"-a", "4"}, "-a"},
      {{"-z", "7"}, "-z"},
      {{"-t", "2"}, "-t 2"},
      {{"-g", "4"}, "-g 4"},
      {{"-G", "1"}, "-G"},
      {{"-q"}, "-q"},
      {{"--bogus"}, "--bogus"},
      {{"-b"}, "-b"},
      {{"stray"}, "stray"},
      {{"-b", "0", "-f", "2"}, "-b 0"},
  };
  for (const Case& c : cases) {
    PerfOptions o;
    std::string error;
    INFO(*c.args.begin());
    CHECK(Parse(c.args, &o, &error) == ParseOutcome::kError);
    INFO(error);
    CHECK(error.find(c.must_mention) != std::string::npos);
  }
}

TEST_CASE("Table header and rows match nccl-tests byte for byte", "[bench]") {
  // Lines copied from shared/anchors/nccl_tests_all_reduce_perf_1rank_h100.txt.
  CHECK(FormatTableHeader() ==
        "#                                                              out-of-place              "
        "         in-place          \n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong   "
        "  time   algbw   busbw  #wrong \n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)           "
        "  (us)  (GB/s)  (GB/s)         \n");
  CHECK(FormatRowPrefix(8, 2, "float", "sum", -1) + FormatRowBody(4.87, 0.0016, 0, 0) +
            FormatRowBody(0.19, 0.04, 0, 0) ==
        "           8             2     float     sum      -1     4.87    0.00    0.00       0  "
        "   0.19    0.04    0.00       0");
  CHECK(FormatRowPrefix(524288, 131072, "float", "sum", -1) + FormatRowBody(5.51, 95.10, 0, 0) +
            FormatRowBody(0.22, 2383.7, 0, 0) ==
        "      524288        131072     float     sum      -1     5.51   95.10    0.00       0  "
        "   0.22  2383.7    0.00       0");
  CHECK(FormatRowPrefix(2097152, 524288, "float", "sum", -1) + FormatRowBody(6.51, 321.98, 0, 0) +
            FormatRowBody(0.20, 10400, 0, 0) ==
        "     2097152        524288     float     sum      -1     6.51  321.98    0.00       0  "
        "   0.20   10400    0.00       0");
  CHECK(FormatRowPrefix(33554432, 8388608, "float", "sum", -1) +
            FormatRowBody(26.90, 1247.4, 0, 0) + FormatRowBody(0.52, 64084, 0, 0) ==
        "    33554432       8388608     float     sum      -1    26.90  1247.4    0.00       0  "
        "   0.52   64084    0.00       0");
  CHECK(FormatRowBody(12.5, 1, 1.5, -1) == "    12.50    1.00    1.50    N/A");
  CHECK(FormatRowBody(1, 1, 1, 123456) == "     1.00    1.00    1.00  123456");
  CHECK(FormatDeviceLine(0, 1165, "hostname") ==
        "#  Rank  0 Group  0 Pid   1165 on   hostname device -1 [cpu] host memory\n");
}

TEST_CASE("FormatFloat follows nccl-tests' getFloatStr", "[bench]") {
  CHECK(FormatFloat(0, 6) == "  0.00");
  CHECK(FormatFloat(9.999, 6) == " 10.00");
  CHECK(FormatFloat(999.5, 6) == "999.50");
  CHECK(FormatFloat(1234.56, 6) == "1234.6");
  CHECK(FormatFloat(123456, 6) == "123456");
  CHECK(FormatFloat(1234567, 6) == " 1e+06");
  CHECK(FormatFloat(1234567, 7) == "1234567");
  CHECK(FormatFloat(12345678, 7) == "1.2e+07");
  CHECK(FormatFloat(INFINITY, 6) == "   inf");
}

TEST_CASE("The bench's float16/bfloat16 conversions", "[bench]") {
  CHECK(BenchFloatToHalf(1.0f) == 0x3C00);
  CHECK(BenchFloatToHalf(-2.0f) == 0xC000);
  CHECK(BenchFloatToHalf(65504.0f) == 0x7BFF);
  CHECK(BenchFloatToHalf(65520.0f) == 0x7C00);
  CHECK(BenchFloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(BenchFloatToHalf(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(BenchFloatToHalf(3 * std::ldexp(1.0f, -25)) == 0x0002);
  CHECK(BenchFloatToHalf(1023 * std::ldexp(1.0f, -24)) == 0x03FF);
  CHECK(BenchFloatToHalf(2049.0f) == 0x6800);
  CHECK(BenchFloatToHalf(2051.0f) == 0x6802);
  CHECK(BenchFloatToHalf(-0.0f) == 0x8000);
  CHECK(BenchFloatToHalf(NAN) == 0x7E00);
  CHECK(BenchFloatToHalf(1.0f / 3) == 0x3555);
  for (uint32_t h = 0; h < 0x7C00; ++h) {  // every finite non-negative half round-trips
    REQUIRE(BenchFloatToHalf(BenchHalfToFloat(static_cast<uint16_t>(h))) == h);
  }
  CHECK(BenchHalfToFloat(0x7C00) == INFINITY);
  CHECK(std::isnan(BenchHalfToFloat(0x7E00)));
  CHECK(BenchFloatToBfloat16(1.0f) == 0x3F80);
  CHECK(BenchFloatToBfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  CHECK(BenchFloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(BenchFloatToBfloat16(-3.0f) == 0xC040);
  CHECK(BenchBfloat16ToFloat(0x4049) == 3.140625f);
}

// Simulates the reduction rank by rank in the element type itself, with plain C++ arithmetic
// per type, and compares with FillReduceExpected.
template <typename T>
std::vector<T> Simulate(braidDataType_t type, braidRedOp_t op, int nranks, uint64_t seed,
                        size_t count) {
  std::vector<T> acc(count), in(count);
  FillReduceInput(type, op, 0, seed, acc.data(), count);
  for (int r = 1; r < nranks; ++r) {
    FillReduceInput(type, op, r, seed, in.data(), count);
    for (size_t i = 0; i < count; ++i) {
      switch (op) {
        case braidSum: case braidAvg: acc[i] = static_cast<T>(acc[i] + in[i]); break;
        case braidProd: acc[i] = static_cast<T>(acc[i] * in[i]); break;
        case braidMax: acc[i] = acc[i] < in[i] ? in[i] : acc[i]; break;
        case braidMin: acc[i] = in[i] < acc[i] ? in[i] : acc[i]; break;
        default: break;
      }
    }
  }
  if (op == braidAvg) {
    for (T& v : acc) v = static_cast<T>(v / static_cast<T>(nranks));
  }
  return acc;
}

TEST_CASE("Reduction patterns: expected results are exact", "[bench]") {
  const size_t count = 1000;
  for (int nranks : {1, 2, 3, 8, 33}) {
    for (int o = 0; o < braidNumOps; ++o) {
      const auto op = static_cast<braidRedOp_t>(o);
      INFO("nranks " << nranks << " op " << OpName(op));
      {
        std::vector<int32_t> want(count);
        FillReduceExpected(braidInt32, op, nranks, 5, want.data(), count);
        CHECK(Simulate<int32_t>(braidInt32, op, nranks, 5, count) == want);
      }
      {
        std::vector<int64_t> want(count);
        FillReduceExpected(braidInt64, op, nranks, 6, want.data(), count);
        CHECK(Simulate<int64_t>(braidInt64, op, nranks, 6, count) == want);
      }
      {
        std::vector<double> want(count);
        FillReduceExpected(braidFloat64, op, nranks, 7, want.data(), count);
        CHECK(Simulate<double>(braidFloat64, op, nranks, 7, count) == want);
      }
      {
        std::vector<float> want(count);
        FillReduceExpected(braidFloat32, op, nranks, 8, want.data(), count);
        CHECK(Simulate<float>(braidFloat32, op, nranks, 8, count) == want);
      }
      // float16 and bfloat16: reduce through float, as braid does.
      for (braidDataType_t type : {braidFloat16, braidBfloat16}) {
        auto to_float = type == braidFloat16 ? BenchHalfToFloat : BenchBfloat16ToFloat;
        auto from_float = type == braidFloat16 ? BenchFloatToHalf : BenchFloatToBfloat16;
        std::vector<uint16_t> in(count), want(count), got(count);
        std::vector<float> acc(count);
        FillReduceInput(type, op, 0, 9, in.data(), count);
        for (size_t i = 0; i < count; ++i) acc[i] = to_float(in[i]);
        for (int r = 1; r < nranks; ++r) {
          FillReduceInput(type, op, r, 9, in.data(), count);
          for (size_t i = 0; i < count; ++i) {
            const float v = to_float(in[i]);
            switch (op) {
              case braidSum: case braidAvg: acc[i] = to_float(from_float(acc[i] + v)); break;
              case braidProd: acc[i] = to_float(from_float(acc[i] * v)); break;
              case braidMax: acc[i] = std::max(acc[i], v); break;
              case braidMin: acc[i] = std::min(acc[i], v); break;
              default: break;
            }
          }
        }
        for (size_t i = 0; i < count; ++i) {
          got[i] = from_float(op == braidAvg ? acc[i] / static_cast<float>(nranks) : acc[i]);
        }
        FillReduceExpected(type, op, nranks, 9, want.data(), count);
        CHECK(CountWrong(type, op, got.data(), want.data(), count) == 0);
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("Avg of integers truncates toward zero; unsigned types wrap", "[bench]") {
  // Ranks 0 and 1, element 1 (seed 0): sum inputs are (7+0)%5-2 = 0 and (7+13)%5-2 = -2.
  int32_t in0[2], in1[2], avg[2];
  FillReduceInput(braidInt32, braidAvg, 0, 0, in0, 2);
  FillReduceInput(braidInt32, braidAvg, 1, 0, in1, 2);
  FillReduceExpected(braidInt32, braidAvg, 2, 0, avg, 2);
  for (int i = 0; i < 2; ++i) CHECK(avg[i] == (in0[i] + in1[i]) / 2);
  // Element 0: inputs -2 and 1 (13%5-2): sum -1, avg 0 (not -1: truncation toward zero).
  CHECK(in0[0] == -2);
  CHECK(in1[0] == 1);
  CHECK(avg[0] == 0);
  uint8_t u[1];
  FillReduceExpected(braidUint8, braidSum, 2, 0, u, 1);
  CHECK(u[0] == 255);  // -2 + 1 modulo 256
}

TEST_CASE("CountWrong: exact, except floating avg within 2 ulp", "[bench]") {
  float want[3] = {1.0f, 2.0f, 3.0f};
  float got[3] = {1.0f, 2.0f, 3.0f};
  CHECK(CountWrong(braidFloat32, braidSum, got, want, 3) == 0);
  got[1] = std::nextafter(2.0f, 3.0f);
  CHECK(CountWrong(braidFloat32, braidSum, got, want, 3) == 1);
  CHECK(CountWrong(braidFloat32, braidAvg, got, want, 3) == 0);
  got[1] = 2.0f + 3 * std::ldexp(1.0f, -22);  // 3 ulp
  CHECK(CountWrong(braidFloat32, braidAvg, got, want, 3) == 1);
  int8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  CHECK(CountWrong(braidInt8, braidSum, a, b, 4) == 1);
  CHECK(CountWrong(braidInt8, braidAvg, a, b, 3) == 0);
  uint16_t h1[2] = {0x3C00, 0x7E00}, h2[2] = {0x3C00, 0x7E01};  // NaN matches NaN
  CHECK(CountWrong(braidFloat16, braidMax, h1, h2, 2) == 0);
}

}  // namespace
}  // namespace braid::bench
