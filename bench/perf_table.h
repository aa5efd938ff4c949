// nccl-tests' table, byte for byte: the device lines, the three header lines and each row's
// prefix and out-of-place / in-place halves. Pure formatting (the runner prints).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid::bench {

// nccl-tests' getFloatStr: fits `value` into `width` columns, with fewer decimals as it grows.
std::string FormatFloat(double value, int width);
// "#  Rank  0 Group  0 Pid   1165 on   hostname device -1 [cpu] host memory"
std::string FormatDeviceLine(int rank, int pid, const char* hostname);
// --device cuda: "#  Rank  0 Group  0 Pid   1165 on         vm device  0 [0000:00:06] NVIDIA H100 80GB HBM3"
std::string FormatCudaDeviceLine(int rank, int pid, const char* hostname, int device,
                                 const std::string& description);
// The three header lines (out-of-place / in-place banner, column names, units), each ending "\n".
std::string FormatTableHeader();
// "           8             2     float     sum      -1"
std::string FormatRowPrefix(size_t bytes, size_t count, const char* type, const char* op, int root);
// "     4.87    0.00    0.00       0"; wrong < 0 prints N/A (no check).
std::string FormatRowBody(double time_us, double algbw, double busbw, int64_t wrong);

}  // namespace braid::bench
