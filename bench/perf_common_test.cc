// The bench's flag parsing, table formatting (against nccl-tests' own output in
// shared/anchors/nccl_tests_all_reduce_perf_1rank_h100.txt) and data checks.
#include "bench/perf_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "bench/collectives.h"

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
  CHECK(q.json_path.empty());

  PerfOptions j;
  REQUIRE(Parse({"-J", "out/run.json"}, &j, &error) == ParseOutcome::kRun);
  CHECK(j.json_path == "out/run.json");
  REQUIRE(Parse({"--output_file", "R.JSON"}, &j, &error) == ParseOutcome::kRun);
  CHECK(j.json_path == "R.JSON");

  PerfOptions r;
  REQUIRE(Parse({"-o", "avg", "-d", "bfloat16"}, &r, &error) == ParseOutcome::kRun);
  CHECK(r.ops == std::vector<braidRedOp_t>{braidAvg});
  CHECK(r.types == std::vector<braidDataType_t>{braidBfloat16});
  CHECK(Parse({"-h"}, &r, &error) == ParseOutcome::kHelp);
  // --device: host by default (existing commands keep host buffers), cuda on request.
  PerfOptions d;
  CHECK_FALSE(d.device_buffers);
  REQUIRE(Parse({"--device", "cuda"}, &d, &error) == ParseOutcome::kRun);
  CHECK(d.device_buffers);
  REQUIRE(Parse({"--device=host"}, &d, &error) == ParseOutcome::kRun);
  CHECK_FALSE(d.device_buffers);
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
      {{"-J", "out.csv"}, "-J"},
      {{"-J", ".json"}, "-J"},
      {{"-J"}, "-J"},
      {{"--device", "gpu"}, "--device"},
      {{"--device"}, "--device"},
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
  const size_t count = 1000;
  std::vector<int32_t> in0(count), in1(count), avg(count);
  std::vector<uint8_t> usum(count);
  FillReduceInput(braidInt32, braidAvg, 0, 0, in0.data(), count);
  FillReduceInput(braidInt32, braidAvg, 1, 0, in1.data(), count);
  FillReduceExpected(braidInt32, braidAvg, 2, 0, avg.data(), count);
  FillReduceExpected(braidUint8, braidSum, 2, 0, usum.data(), count);
  int negative_odd = 0, negative = 0;
  for (size_t i = 0; i < count; ++i) {
    const int32_t sum = in0[i] + in1[i];
    REQUIRE(avg[i] == sum / 2);  // C++: toward zero, so -3 / 2 == -1, not -2
    negative_odd += sum < 0 && sum % 2 != 0;
    negative += sum < 0;
    REQUIRE(usum[i] == static_cast<uint8_t>(sum + 256));  // modulo 256
  }
  CHECK(negative_odd > 0);  // the pattern exercises truncation and wrapping
  CHECK(negative > 0);
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


// ---- Patterns for the collectives that move data ----------------------------------------------

TEST_CASE("FillReduceExpected's first selects a block of the full result", "[bench]") {
  for (braidDataType_t type : {braidInt32, braidUint8, braidFloat32, braidFloat16}) {
    for (int o = 0; o < braidNumOps; ++o) {
      const auto op = static_cast<braidRedOp_t>(o);
      const size_t elem = TypeSize(type);
      std::vector<char> full(100 * elem), block(30 * elem);
      FillReduceExpected(type, op, 3, 4, full.data(), 100);
      FillReduceExpected(type, op, 3, 4, block.data(), 30, 60);
      CHECK(std::memcmp(block.data(), full.data() + 60 * elem, 30 * elem) == 0);
    }
  }
}

TEST_CASE("Rank and block data: small exact values that tell ranks, blocks and shifts apart",
          "[bench]") {
  const int64_t count = 4096;
  std::vector<int32_t> a(count), b(count), c(count + 1);
  FillRankData(braidInt32, 0, 1, a.data(), count);
  for (int32_t v : a) REQUIRE((v >= 0 && v < 97));
  // Another rank, another seed, a shift by one: nearly every element differs.
  FillRankData(braidInt32, 1, 1, b.data(), count);
  CHECK(CountWrong(braidInt32, braidSum, a.data(), b.data(), count) > count * 9 / 10);
  FillRankData(braidInt32, 0, 2, b.data(), count);
  CHECK(CountWrong(braidInt32, braidSum, a.data(), b.data(), count) > count * 9 / 10);
  FillRankData(braidInt32, 0, 1, c.data(), count + 1);
  CHECK(CountWrong(braidInt32, braidSum, a.data(), c.data() + 1, count) > count * 9 / 10);
  // No period: a shift by 97 (the value range) is caught too.
  FillRankData(braidInt32, 0, 1, b.data(), count);
  CHECK(CountWrong(braidInt32, braidSum, a.data() + 97, b.data(), count - 97) > count * 8 / 10);
  // Blocks: (src, dst) and (dst, src) differ, and differ from rank data.
  FillBlockData(braidInt32, 1, 2, 1, b.data(), count);
  FillBlockData(braidInt32, 2, 1, 1, c.data(), count);
  CHECK(CountWrong(braidInt32, braidSum, b.data(), c.data(), count) > count * 9 / 10);
  FillRankData(braidInt32, 1, 1, c.data(), count);
  CHECK(CountWrong(braidInt32, braidSum, b.data(), c.data(), count) > count * 9 / 10);
  // The same values in every type.
  for (int t = 0; t < braidNumTypes; ++t) {
    const auto type = static_cast<braidDataType_t>(t);
    std::vector<char> buf(count * TypeSize(type)), again(buf.size());
    FillBlockData(type, 3, 0, 9, buf.data(), count);
    FillBlockData(type, 3, 0, 9, again.data(), count);
    CHECK(buf == again);
  }
  std::vector<uint16_t> half(count);
  FillRankData(braidFloat16, 0, 1, half.data(), count);
  for (size_t i = 0; i < count; ++i) REQUIRE(BenchHalfToFloat(half[i]) == a[i]);
}

// ---- Every collective's shape and bus-bandwidth factor, as nccl-tests ---------------------------

struct Shape {
  const char* name;
  size_t send, recv, param, send_off, recv_off, bw;
  double factor_n4;
};

TEST_CASE("Collectives: nccl-tests' sizes, in-place offsets and bus-bandwidth factors",
          "[bench]") {
  // count 1000 float elements, 4 ranks.
  const Shape shapes[] = {
      {"all_reduce_perf", 1000, 1000, 1000, 0, 0, 1000, 1.5},
      {"all_gather_perf", 250, 1000, 250, 250, 0, 1000, 0.75},
      {"broadcast_perf", 1000, 1000, 1000, 0, 0, 1000, 1.0},
      {"reduce_perf", 1000, 1000, 1000, 0, 0, 1000, 1.0},
      {"reduce_scatter_perf", 1000, 250, 250, 0, 250, 1000, 0.75},
      {"alltoall_perf", 992, 992, 248, 0, 0, 992, 0.75},  // 250 per peer, down to 16 B
      {"gather_perf", 250, 1000, 250, 250, 0, 1000, 0.75},
      {"scatter_perf", 1000, 250, 250, 0, 250, 1000, 0.75},
      {"sendrecv_perf", 1000, 1000, 1000, 0, 0, 1000, 1.0},
  };
  const std::vector<const Collective*> all = AllCollectives();
  REQUIRE(all.size() == 9);
  for (size_t i = 0; i < all.size(); ++i) {
    const Collective& c = *all[i];
    const Shape& want = shapes[i];
    INFO(c.Name());
    REQUIRE(std::string(c.Name()) == want.name);
    const CollSizes s = c.Sizes(1000, 4, 4);
    CHECK(s.send_count == want.send);
    CHECK(s.recv_count == want.recv);
    CHECK(s.param_count == want.param);
    CHECK(s.send_inplace_offset == want.send_off);
    CHECK(s.recv_inplace_offset == want.recv_off);
    CHECK(s.bw_count == want.bw);
    CHECK(c.BusBandwidthFactor(4) == Approx(want.factor_n4));
    const bool ring = want.factor_n4 == 0.75;
    CHECK(c.BusBandwidthFactor(1) == Approx(want.factor_n4 == 1.5 ? 0.0 : ring ? 0.0 : 1.0));
    CHECK(c.BusBandwidthFactor(8) ==
          Approx(want.factor_n4 == 1.5 ? 1.75 : ring ? 0.875 : 1.0));
  }
  CHECK(ReduceCollective().Rooted());
  CHECK(BroadcastCollective().Rooted());
  CHECK(GatherCollective().Rooted());
  CHECK(ScatterCollective().Rooted());
  CHECK_FALSE(AllGatherCollective().Rooted());
  CHECK_FALSE(SendRecvCollective().ChecksInPlace());
  CHECK(AllToAllCollective().ChecksInPlace());
  CHECK(ReduceScatterCollective().Reduces());
  CHECK_FALSE(AllToAllCollective().Reduces());
  // all-to-all rounds each peer's block down to 16 bytes: 16 int8, 2 doubles.
  CHECK(AllToAllCollective().Sizes(100, 1, 2).param_count == 48);
  CHECK(AllToAllCollective().Sizes(100, 8, 2).param_count == 50);
  CHECK(AllToAllCollective().Sizes(2, 4, 2).param_count == 0);
}

// ---- Expected values against a reference run of each collective -------------------------------
// Each rank's buffers are prepared exactly as the driver does (PrepareRank, in-place layouts
// included); a plain reference implementation of the collective then moves and reduces the
// data, and every rank's recvbuff must match its expected values.

struct SimRank {
  std::vector<char> send, recv, expected;
  RankBuffers b;
};

template <typename T>
std::vector<char> ReduceRef(const std::vector<std::vector<char>>& inputs, braidRedOp_t op) {
  const size_t count = inputs[0].size() / sizeof(T);
  std::vector<T> acc(count);
  std::memcpy(acc.data(), inputs[0].data(), count * sizeof(T));
  for (size_t r = 1; r < inputs.size(); ++r) {
    const T* in = reinterpret_cast<const T*>(inputs[r].data());
    for (size_t i = 0; i < count; ++i) {
      switch (op) {
        case braidSum: case braidAvg: acc[i] = static_cast<T>(acc[i] + in[i]); break;
        case braidProd: acc[i] = static_cast<T>(acc[i] * in[i]); break;
        case braidMax: acc[i] = std::max(acc[i], in[i]); break;
        case braidMin: acc[i] = std::min(acc[i], in[i]); break;
        default: break;
      }
    }
  }
  if (op == braidAvg) {
    for (T& v : acc) v = static_cast<T>(v / static_cast<T>(inputs.size()));
  }
  std::vector<char> out(count * sizeof(T));
  std::memcpy(out.data(), acc.data(), out.size());
  return out;
}

std::vector<char> Reduced(braidDataType_t type, braidRedOp_t op,
                          const std::vector<std::vector<char>>& inputs) {
  switch (type) {
    case braidInt32: return ReduceRef<int32_t>(inputs, op);
    case braidInt64: return ReduceRef<int64_t>(inputs, op);
    case braidFloat32: return ReduceRef<float>(inputs, op);
    case braidFloat64: return ReduceRef<double>(inputs, op);
    default: FAIL("no reference reduction for " << TypeName(type)); return {};
  }
}

// What a correct braid leaves in every rank's recvbuff. `bug` lets tests break it.
enum class Bug { kNone, kSwapBlocks, kTouchNonRoot, kNothing };

void RunReference(const Collective& c, const CollSizes& s, braidDataType_t type, braidRedOp_t op,
                  int root, std::vector<SimRank>& ranks, Bug bug = Bug::kNone) {
  const int n = static_cast<int>(ranks.size());
  const size_t elem = TypeSize(type);
  std::vector<std::vector<char>> in;  // every rank's send data, read before anything is written
  for (SimRank& r : ranks) in.emplace_back(r.b.send, r.b.send + s.send_count * elem);
  auto out = [&](int r) { return ranks[static_cast<size_t>(r)].b.recv; };
  const std::string name = c.Name();
  if (bug == Bug::kNothing) return;
  if (name == "all_reduce_perf" || name == "reduce_perf") {
    const std::vector<char> sum = Reduced(type, op, in);
    for (int r = 0; r < n; ++r) {
      if (name == "reduce_perf" && r != root && bug != Bug::kTouchNonRoot) continue;
      std::memcpy(out(r), sum.data(), sum.size());
    }
  } else if (name == "reduce_scatter_perf") {
    const std::vector<char> sum = Reduced(type, op, in);
    const size_t block = s.recv_count * elem;
    for (int r = 0; r < n; ++r) std::memcpy(out(r), sum.data() + block * r, block);
  } else if (name == "all_gather_perf" || name == "gather_perf") {
    const size_t block = s.send_count * elem;
    for (int r = 0; r < n; ++r) {
      if (name == "gather_perf" && r != root && bug != Bug::kTouchNonRoot) continue;
      for (int j = 0; j < n; ++j) std::memcpy(out(r) + block * j, in[j].data(), block);
    }
  } else if (name == "broadcast_perf") {
    for (int r = 0; r < n; ++r) std::memcpy(out(r), in[root].data(), in[root].size());
  } else if (name == "scatter_perf") {
    const size_t block = s.recv_count * elem;
    for (int r = 0; r < n; ++r) std::memcpy(out(r), in[root].data() + block * r, block);
  } else if (name == "alltoall_perf") {
    const size_t block = s.param_count * elem;
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < n; ++j) std::memcpy(out(r) + block * j, in[j].data() + block * r, block);
    }
  } else if (name == "sendrecv_perf") {
    for (int r = 0; r < n; ++r) std::memcpy(out(r), in[(r - 1 + n) % n].data(), in[0].size());
  } else {
    FAIL("no reference for " << name);
  }
  if (bug == Bug::kSwapBlocks && n > 1) {  // rank 0's first two elements of blocks 0 and 1
    const size_t block = (s.recv_count / n) * elem;
    if (block > 0) {
      std::vector<char> tmp(out(0), out(0) + block);
      std::memcpy(out(0), out(0) + block, block);
      std::memcpy(out(0) + block, tmp.data(), block);
    }
  }
}

// Sum over ranks of wrong elements after a reference run.
int64_t Simulate(const Collective& c, size_t count, braidDataType_t type, braidRedOp_t op,
                 int root, int nranks, bool in_place, Bug bug = Bug::kNone) {
  const size_t elem = TypeSize(type);
  const CollSizes s = c.Sizes(count, elem, nranks);
  std::vector<SimRank> ranks(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    SimRank& sr = ranks[static_cast<size_t>(r)];
    size_t send_bytes, recv_bytes;
    BufferBytes(s, elem, r, &send_bytes, &recv_bytes);
    sr.send.assign(send_bytes + 1, 0);
    sr.recv.assign(recv_bytes + 1, 0);
    sr.expected.assign(s.recv_count * elem + 1, 0);
    sr.b = PrepareRank(c, s, type, op, root, r, nranks, 7, in_place, sr.send.data(),
                       sr.recv.data(), sr.expected.data());
    if (in_place) {
      CHECK(sr.b.send == sr.recv.data() + s.send_inplace_offset * elem * r);
      CHECK(sr.b.recv == sr.recv.data() + s.recv_inplace_offset * elem * r);
    } else {
      CHECK(sr.b.send == sr.send.data());
      CHECK(sr.b.recv == sr.recv.data());
    }
  }
  RunReference(c, s, type, op, root, ranks, bug);
  int64_t wrong = 0;
  for (SimRank& sr : ranks) {
    wrong += CountWrong(type, op, sr.b.recv, sr.expected.data(), s.recv_count);
  }
  return wrong;
}

TEST_CASE("Collectives: expected values match a reference run, in and out of place", "[bench]") {
  for (const Collective* c : AllCollectives()) {
    const std::vector<braidDataType_t> types =
        c->Reduces() ? std::vector<braidDataType_t>{braidInt32, braidInt64, braidFloat32,
                                                    braidFloat64}
                     : std::vector<braidDataType_t>{braidInt8,   braidUint8,  braidInt32,
                                                    braidUint32, braidInt64,  braidUint64,
                                                    braidFloat16, braidFloat32, braidFloat64,
                                                    braidBfloat16};
    const int nops = c->Reduces() ? braidNumOps : 1;
    for (int nranks : {1, 2, 3, 4, 5}) {
      for (int root : {0, nranks - 1}) {
        if (!c->Rooted() && root != 0) continue;
        for (braidDataType_t type : types) {
          for (int o = 0; o < nops; ++o) {
            for (size_t count : {size_t{0}, size_t{1}, size_t{97}, size_t{1000}}) {
              for (bool in_place : {false, true}) {
                const auto op = static_cast<braidRedOp_t>(o);
                INFO(c->Name() << " nranks " << nranks << " root " << root << " "
                               << TypeName(type) << " " << OpName(op) << " count " << count
                               << (in_place ? " in place" : " out of place"));
                REQUIRE(Simulate(*c, count, type, op, root, nranks, in_place) == 0);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("Collectives: the check catches misplaced, missing and stray data", "[bench]") {
  for (const Collective* c : AllCollectives()) {
    INFO(c->Name());
    for (bool in_place : {false, true}) {
      // A collective that writes nothing leaves the poison behind (except where nothing is
      // expected: sendrecv/broadcast in place still hold the input on some ranks).
      CHECK(Simulate(*c, 1024, braidInt32, braidSum, 1, 4, in_place, Bug::kNothing) > 0);
    }
  }
  for (const Collective* c : {&AllGatherCollective(), &GatherCollective(), &AllToAllCollective(),
                              &AllReduceCollective(), &ReduceScatterCollective()}) {
    INFO(c->Name());
    CHECK(Simulate(*c, 1024, braidInt32, braidSum, 0, 4, false, Bug::kSwapBlocks) > 0);
  }
  // Reduce and gather must leave non-roots' recvbuff alone.
  CHECK(Simulate(ReduceCollective(), 1024, braidInt32, braidSum, 2, 4, false,
                 Bug::kTouchNonRoot) > 0);
  CHECK(Simulate(GatherCollective(), 1024, braidInt32, braidSum, 2, 4, false,
                 Bug::kTouchNonRoot) > 0);
}

// ---- JSON report ------------------------------------------------------------------------------

TEST_CASE("JsonString escapes as nccl-tests' sanitizeJson", "[bench]") {
  CHECK(JsonString("plain") == "\"plain\"");
  CHECK(JsonString("a\"b\\c/d\te\nf") == "\"a\\\"b\\\\c\\/d\\te\\nf\"");
  CHECK(JsonString(std::string("x\x01y\xC3\xA9z")) == "\"xyz\"");
}

TEST_CASE("KeepEnvEntry keeps launch and BRAID_ variables, never secrets", "[bench]") {
  CHECK(KeepEnvEntry("RANK=1"));
  CHECK(KeepEnvEntry("WORLD_SIZE=4"));
  CHECK(KeepEnvEntry("MASTER_PORT=29500"));
  CHECK(KeepEnvEntry("BRAID_ALGO=ring"));
  CHECK_FALSE(KeepEnvEntry("BRAID_SECRET=abc"));
  CHECK_FALSE(KeepEnvEntry("BRAID_STORE_TOKEN=abc"));
  CHECK_FALSE(KeepEnvEntry("HOME=/root"));
  CHECK_FALSE(KeepEnvEntry("RANKING=1"));
  CHECK_FALSE(KeepEnvEntry("AWS_SECRET_ACCESS_KEY=x"));
}

JsonReport SampleReport() {
  JsonReport r;
  r.collective = "all_gather_perf";
  r.nranks = 2;
  r.braid_version = 100;
  r.start_time = "2026-01-02 03:04:05";
  r.end_time = "2026-01-02 03:04:06";
  r.args = {"all_gather_perf", "-b", "8", "-J", "a/b.json"};
  r.env = {"RANK=0"};
  r.options.min_bytes = 8;
  r.options.max_bytes = 16;
  r.options.step_factor = 2;
  r.devices = {{0, 11, "host"}, {1, 12, "host"}};
  JsonRow row;
  row.bytes = 8;
  row.count = 1;
  row.type = "float";
  row.redop = "none";
  row.root = -1;
  row.out_of_place = {5.5, 0.0015, 0.00075, 0};
  row.in_place = {4.25, 0.002, 0.001, -1};
  row.iterations = 20;
  r.rows = {row};
  row.bytes = 16;
  row.count = 2;
  row.out_of_place.wrong = 3;
  r.rows.push_back(row);
  r.errors = 1;
  r.avg_busbw = 0.0005;
  return r;
}

TEST_CASE("FormatJson writes nccl-tests' keys", "[bench]") {
  const std::string json = FormatJson(SampleReport());
  CHECK(json ==
        "{\"version\":2,\"start_time\":\"2026-01-02 03:04:05\","
        "\"args\":[\"all_gather_perf\",\"-b\",\"8\",\"-J\",\"a\\/b.json\"],"
        "\"env\":[\"RANK=0\"],\"braid_version\":100,\"collective\":\"all_gather_perf\","
        "\"nranks\":2,\n"
        "\"config\":{\"nthreads\":1,\"ngpus\":1,\"minimum_bytes\":8,\"maximum_bytes\":16,"
        "\"step_factor\":2,\"warmup_iters\":1,\"iterations\":20,\"aggregated_iterations\":1,"
        "\"validation\":1,\"graph\":0,\"blocking_collectives\":\"false\","
        "\"per_iter_timing\":\"false\",\"parallel_init\":\"false\",\"average\":1,"
        "\"devices\":[{\"rank\":0,\"group\":0,\"pid\":11,\"hostname\":\"host\",\"device\":-1,"
        "\"device_hex\":\"cpu\",\"device_info\":\"host memory\"},{\"rank\":1,\"group\":0,"
        "\"pid\":12,\"hostname\":\"host\",\"device\":-1,\"device_hex\":\"cpu\","
        "\"device_info\":\"host memory\"}]},\n"
        "\"results\":[\n"
        "{\"size\":8,\"count\":1,\"type\":\"float\",\"redop\":\"none\",\"root\":\"    -1\","
        "\"out_of_place\":{\"time\":5.5,\"alg_bw\":0.0015,\"bus_bw\":0.00075,"
        "\"nwrong\":0},"
        "\"in_place\":{\"time\":4.25,\"alg_bw\":0.002,\"bus_bw\":0.001,"
        "\"nwrong\":null},\"actual_iterations\":20,\"experiment_name\":\"\"},\n"
        "{\"size\":16,\"count\":2,\"type\":\"float\",\"redop\":\"none\",\"root\":\"    -1\","
        "\"out_of_place\":{\"time\":5.5,\"alg_bw\":0.0015,\"bus_bw\":0.00075,"
        "\"nwrong\":3},"
        "\"in_place\":{\"time\":4.25,\"alg_bw\":0.002,\"bus_bw\":0.001,"
        "\"nwrong\":null},\"actual_iterations\":20,\"experiment_name\":\"\"}],\n"
        "\"out_of_bounds\":{\"count\":1,\"okay\":\"false\"},"
        "\"average_bus_bandwidth\":{\"bandwidth\":0.0005,\"okay\":\"unchecked\"},"
        "\"errors\":[],\"end_time\":\"2026-01-02 03:04:06\"}\n");

  JsonReport r = SampleReport();
  r.options.step_factor = 1;
  r.options.step_bytes = 4;
  r.rows.resize(1);
  r.rows[0].root = 3;
  r.rows[0].in_place.busbw = NAN;
  r.rows[0].in_place.algbw = INFINITY;
  r.rows[0].out_of_place.time_us = 123456.789;
  r.rows[0].out_of_place.algbw = 2.5e-5;
  r.messages = {"rank 1: braidGather failed"};
  const std::string other = FormatJson(r);
  CHECK(other.find("\"step_bytes\":4,") != std::string::npos);
  CHECK(other.find("\"step_factor\"") == std::string::npos);
  CHECK(other.find("\"root\":\"     3\"") != std::string::npos);
  CHECK(other.find("\"alg_bw\":\"inf\",\"bus_bw\":\"nan\"") != std::string::npos);
  CHECK(other.find("\"time\":123456.789,\"alg_bw\":2.5e-05,") != std::string::npos);
  CHECK(other.find("\"errors\":[\"rank 1: braidGather failed\"]") != std::string::npos);
}

TEST_CASE("FormatJson with device buffers: device fields, buffers and the memory bound",
          "[bench]") {
  JsonReport r = SampleReport();
  CHECK(FormatJson(r).find("\"buffers\"") == std::string::npos);  // host: nccl-tests' keys only
  CHECK(FormatJson(r).find("\"memory_bound\"") == std::string::npos);
  r.buffers = "cuda";
  r.devices[0].device = 0;
  r.devices[0].device_hex = "0000:00:06";
  r.devices[0].device_info = "NVIDIA H100 80GB HBM3";
  r.memory_bound.copy_gbps = 3000;
  r.memory_bound.ranks_per_gpu = 2;
  r.memory_bound.rows.push_back(JsonBoundRow{67108864, 89.5, 750, 61.25, 60.5});
  const std::string json = FormatJson(r);
  CHECK(json.find("\"device\":0,\"device_hex\":\"0000:00:06\",\"device_info\":\"NVIDIA H100 "
                  "80GB HBM3\"") != std::string::npos);
  CHECK(json.find("\"buffers\":\"cuda\",") != std::string::npos);
  CHECK(json.find("\"memory_bound\":{\"formula\":\"t >= 2*N*S/B\",\"copy_gbps\":3000,"
                  "\"ranks_per_gpu\":2,\"rows\":[{\"size\":67108864,\"bound_time\":89.5,"
                  "\"bound_bus_bw\":750,\"out_of_place_percent\":61.25,"
                  "\"in_place_percent\":60.5}]}") != std::string::npos);
  CHECK(FormatCudaDeviceLine(0, 1165, "vm", 0, "[0000:00:06] NVIDIA H100 80GB HBM3") ==
        "#  Rank  0 Group  0 Pid   1165 on         vm device  0 [0000:00:06] NVIDIA H100 80GB "
        "HBM3\n");
}

TEST_CASE("OpenJsonFile never overwrites: path, path.0, path.1", "[bench]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/json_" + std::to_string(getpid());
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  const std::string path = dir + "/r.json";
  std::string opened;
  for (const std::string& want : {path, path + ".0", path + ".1"}) {
    FILE* f = OpenJsonFile(path, &opened);
    REQUIRE(f != nullptr);
    CHECK(opened == want);
    std::fputs("{}", f);
    std::fclose(f);
  }
  CHECK(OpenJsonFile(dir + "/missing/r.json", &opened) == nullptr);
  CHECK(opened.empty());
}

// ---- Types (perf_types) and the driver (perf_runner) ---------------------------------------

TEST_CASE("Type and op names follow nccl-tests; values outside the enums are named invalid",
          "[bench]") {
  const char* const names[] = {"int8",  "uint8",  "int32", "uint32", "int64",
                               "uint64", "half",  "float", "double", "bfloat16"};
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  for (int t = 0; t < braidNumTypes; ++t) {
    const braidDataType_t type = static_cast<braidDataType_t>(t);
    CHECK(std::string(TypeName(type)) == names[t]);
    CHECK(TypeSize(type) == sizes[t]);
    CHECK(IsFloatingType(type) == (t >= braidFloat16));
  }
  CHECK(std::string(TypeName(braidNumTypes)) == "invalid");
  CHECK(TypeSize(braidNumTypes) == 0);
  const char* const ops[] = {"sum", "prod", "max", "min", "avg"};
  for (int o = 0; o < braidNumOps; ++o) {
    CHECK(std::string(OpName(static_cast<braidRedOp_t>(o))) == ops[o]);
  }
  CHECK(std::string(OpName(braidNumOps)) == "invalid");
  // -d and -o accept exactly these spellings.
  for (const char* name : names) {
    PerfOptions o;
    std::string error;
    INFO(name);
    CHECK(Parse({"-d", name}, &o, &error) == ParseOutcome::kRun);
    CHECK(o.types.size() == 1);
  }
}

// Runs PerfMain over {"all_reduce_perf", args...} with AllReduceCollective.
// A loopback port nobody listens on now (bound to 0, then released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

int RunPerfMain(std::initializer_list<const char*> args) {
  std::vector<std::string> storage{"all_reduce_perf"};
  for (const char* a : args) storage.emplace_back(a);
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(&s[0]);
  argv.push_back(nullptr);
  return PerfMain(static_cast<int>(storage.size()), argv.data(), AllReduceCollective());
}

TEST_CASE("PerfMain's exit statuses: help 0, bad flags 2, a failed braid call 3", "[bench]") {
  CHECK(RunPerfMain({"-h"}) == 0);
  CHECK(RunPerfMain({"-b", "1M", "-e", "1K"}) == 2);
  CHECK(RunPerfMain({"-x", "1"}) == 2);
  // No launch environment: braidCommInitEnv fails, and the driver reports it as a value (no
  // exception crosses PerfMain) with status 3, before any communicator exists.
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
                           "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}) {
    unsetenv(name);
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string json = std::string(tmp ? tmp : "/tmp") + "/init_fails_" +
                           std::to_string(getpid()) + ".json";
  CHECK(RunPerfMain({"-b", "8", "-e", "8", "-J", json.c_str()}) == 3);
  // The report is opened after the communicator exists, so none was written.
  CHECK(std::ifstream(json).good() == false);
}

TEST_CASE("--device cuda on a machine without a GPU: SKIPPED, exit 77, nothing measured",
          "[bench]") {
  // One real rank (its own store on loopback). CI machines have no GPU: a bench with CUDA finds
  // none, one built without a toolkit says so; either way 77, never a pass.
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(FreePort()).c_str(), 1);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string json = std::string(tmp ? tmp : "/tmp") + "/no_gpu_" +
                           std::to_string(getpid()) + ".json";
  CHECK(RunPerfMain({"--device", "cuda", "-b", "8", "-e", "8", "-J", json.c_str()}) == 77);
  CHECK(std::ifstream(json).good() == false);
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(name);
}

}  // namespace
}  // namespace braid::bench
