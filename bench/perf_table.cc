#include "bench/perf_table.h"

#include <cmath>
#include <cstdint>

#include "bench/perf_printf.h"

namespace braid::bench {

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

std::string FormatCudaDeviceLine(int rank, int pid, const char* hostname, int device,
                                 const std::string& description) {
  return Printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n", rank, 0, pid, hostname,
                device, description.c_str());
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

}  // namespace braid::bench
