#include "bench/perf_json.h"

#include <fcntl.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "bench/perf_printf.h"

namespace braid::bench {

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
    s += Printf("%s{\"rank\":%d,\"group\":0,\"pid\":%d,\"hostname\":%s,\"device\":%d,"
                "\"device_hex\":%s,\"device_info\":%s}",
                i ? "," : "", d.rank, d.pid, JsonString(d.hostname).c_str(), d.device,
                JsonString(d.device_hex).c_str(), JsonString(d.device_info).c_str());
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
  if (r.buffers != "host") s += "\"buffers\":" + JsonString(r.buffers) + ",";
  if (!r.memory_bound.rows.empty()) {
    const JsonMemoryBound& m = r.memory_bound;
    s += Printf("\n\"memory_bound\":{\"formula\":\"t >= 2*N*S/B\",\"copy_gbps\":%s,"
                "\"ranks_per_gpu\":%d,\"rows\":[",
                JsonDouble(m.copy_gbps).c_str(), m.ranks_per_gpu);
    for (size_t i = 0; i < m.rows.size(); ++i) {
      const JsonBoundRow& b = m.rows[i];
      s += Printf("%s{\"size\":%zu,\"bound_time\":%s,\"bound_bus_bw\":%s,"
                  "\"out_of_place_percent\":%s,\"in_place_percent\":%s}",
                  i ? "," : "", b.bytes, JsonDouble(b.bound_us).c_str(),
                  JsonDouble(b.bound_busbw).c_str(), JsonDouble(b.out_of_place_percent).c_str(),
                  JsonDouble(b.in_place_percent).c_str());
    }
    s += "]},\n";
  }
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

}  // namespace braid::bench
