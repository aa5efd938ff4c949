#include "algorithms/calibration.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/base/logging.h"

namespace braid::algorithms {
namespace {

// The built-in calibration: the one place in the code that holds measured numbers.
//
// Measured 2026-11-23 on the development VMs (2 vCPU KVM guests, 32 MiB L3, shared with other
// engineers' builds, so every run under `nice -n -19` and each number the best of 40 short
// rounds), 2 ranks as processes:
//   bazel build //bench:calibrate
//   BRAID_TRANSPORTS=shm nice -n -19 bazel-bin/bench/calibrate
//   BRAID_TRANSPORTS=tcp nice -n -19 bazel-bin/bench/calibrate
//            one step (us)   exchange GB/s   reduce GB/s (512 KiB / 64 MiB)
//   shm      0.9 - 9          1.0 - 1.7       18 - 36 / 4 - 5
//   tcp      10 - 40          0.6 - 1.1       20 - 39 / 3 - 8
// then placed within those ranges where they put the predicted crossovers where
// bench/select_check.py measured them (docs/ALGORITHMS.md, "Calibration" and "Selection check"):
// bandwidth the exchange rate, reduction the cache-resident rate, memory reduction the 64 MiB
// rate; the step latency with ranks sharing cores at the loaded end of the range (a peer that
// was descheduled answers after a wake-up), with a core per rank what an 8-byte 2-rank rd
// allreduce measures (0.31-0.33 us = latency + message); the cache half the L3 (rings, scratch
// and other programs hold the rest); message, pipeline and fan-out costs fitted to the
// select_check times of 2026-11-23/24 (LinkModel in algorithms/algorithm.h says what each prices).
TransportCalibration BuiltInShm() {
  TransportCalibration t;
  t.latency_us = 8.0;
  t.latency_us_core_per_rank = 0.1;
  t.message_us = 0.5;
  t.message_us_core_per_rank = 0.25;
  t.bandwidth_gbps = 1.5;
  t.reduce_gbps = 20.0;
  t.memory_reduce_gbps = 4.5;
  t.cache_bytes = 16.0 * 1024 * 1024;
  t.pipeline_us = 0.3;
  t.fan_out_us = 1.0;
  return t;
}

TransportCalibration BuiltInTcp() {
  TransportCalibration t;
  t.latency_us = 10.0;
  t.latency_us_core_per_rank = 10.0;
  t.message_us = 0.5;
  t.message_us_core_per_rank = 0.5;
  t.bandwidth_gbps = 1.0;
  t.reduce_gbps = 20.0;
  t.memory_reduce_gbps = 4.5;
  t.cache_bytes = 16.0 * 1024 * 1024;
  t.pipeline_us = 0.3;
  t.fan_out_us = 12.0;
  return t;
}

constexpr const char* kBuiltInSource = "built-in (measured on the development VMs, "
                                       "algorithms/calibration.cc)";

// The first line of a Serialize record; the second says "file" or "built-in", the third is the
// source, and a file's text follows.
constexpr const char* kRecordHeader = "braid-calibration 1";

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool ValidTransportName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

const CalibrationKey* FindKey(const std::string& name) {
  for (const CalibrationKey& key : CalibrationKeys()) {
    if (name == key.name) return &key;
  }
  return nullptr;
}

// The shortest decimal text that reads back as `value` (so files stay readable: 0.1, not
// 0.10000000000000001).
std::string Number(double value) {
  char text[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(text, sizeof(text), "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

}  // namespace

const std::vector<CalibrationKey>& CalibrationKeys() {
  using T = TransportCalibration;
  static const std::vector<CalibrationKey> keys = {
      {"latency_us", &T::latency_us, false, "one message step, ranks share cores (alpha)"},
      {"latency_us_core_per_rank", &T::latency_us_core_per_rank, false,
       "one message step, a core per rank"},
      {"message_us", &T::message_us, false, "per pipelined chunk message, ranks share cores"},
      {"message_us_core_per_rank", &T::message_us_core_per_rank, false,
       "per pipelined chunk message, a core per rank"},
      {"bandwidth_gbps", &T::bandwidth_gbps, true, "GB/s per link while every rank sends (1/beta)"},
      {"reduce_gbps", &T::reduce_gbps, true, "GB/s reducing a cache-resident chunk (1/gamma)"},
      {"memory_reduce_gbps", &T::memory_reduce_gbps, true,
       "GB/s reducing buffers that outgrew the cache"},
      {"cache_bytes", &T::cache_bytes, false, "last-level cache the ranks of a host share"},
      {"pipeline_us", &T::pipeline_us, false, "per call of a pipelined algorithm (ring, tree)"},
      {"fan_out_us", &T::fan_out_us, false, "per message a rank has in flight at once in a step"},
      {"single_copy_bytes", &T::single_copy_bytes, false,
       "messages from this size up between processes copied once (process_vm_readv), a CPU per "
       "rank; 0 never"},
      {"single_copy_bytes_shared_cores", &T::single_copy_bytes_shared_cores, false,
       "the same where ranks share CPUs; 0 never"},
      {"single_copy_gbps", &T::single_copy_gbps, false,
       "GB/s per direction of 16 MiB exchanges by single copy (0: refused or not measured)"},
  };
  return keys;
}

Calibration Calibration::BuiltIn() {
  Calibration calibration;
  calibration.source_ = kBuiltInSource;
  calibration.transports_["shm"] = BuiltInShm();
  calibration.transports_["tcp"] = BuiltInTcp();
  return calibration;
}

Result<Calibration> Calibration::Parse(const std::string& text, const std::string& file,
                                       std::vector<std::string>* warnings) {
  CalibrationValues values;
  std::map<std::string, int> first_line;  // "transport.key" -> line it was given on
  bool version_seen = false;
  std::istringstream lines(text);
  std::string raw;
  for (int number = 1; std::getline(lines, raw); ++number) {
    const std::string where = file + ":" + std::to_string(number) + ": ";
    const std::string line = Trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    const size_t equals = line.find('=');
    if (equals == std::string::npos) {
      return Status::InvalidArgument(where + "expected 'key = value', got '" + line + "'");
    }
    const std::string key = Trim(line.substr(0, equals)), value = Trim(line.substr(equals + 1));
    if (key.empty() || value.empty()) {
      return Status::InvalidArgument(where + "expected 'key = value', got '" + line + "'");
    }
    if (key == "version") {
      if (value != "1") {
        return Status::InvalidArgument(where + "version " + value +
                                       " is not supported (this build reads version 1)");
      }
      version_seen = true;
      continue;
    }
    const size_t dot = key.find('.');
    const CalibrationKey* known =
        dot == std::string::npos ? nullptr : FindKey(key.substr(dot + 1));
    if (known == nullptr) {
      if (warnings != nullptr) warnings->push_back(where + "unknown key '" + key + "' (skipped)");
      continue;
    }
    const std::string transport = key.substr(0, dot);
    if (!ValidTransportName(transport)) {
      return Status::InvalidArgument(where + "'" + transport +
                                     "' is not a transport name (letters, digits, '_', '-')");
    }
    char* end = nullptr;
    errno = 0;
    const double number_value = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || errno == ERANGE) {
      return Status::InvalidArgument(where + key + " = '" + value + "' is not a number");
    }
    if (!std::isfinite(number_value) || number_value < 0 ||
        (known->positive && number_value == 0)) {
      return Status::InvalidArgument(where + key + " = " + value + ": must be a finite number " +
                                     (known->positive ? "> 0" : ">= 0"));
    }
    auto [previous, inserted] = first_line.emplace(key, number);
    if (!inserted) {
      return Status::InvalidArgument(where + key + " is given twice (first on line " +
                                     std::to_string(previous->second) + ")");
    }
    values[transport][known->name] = number_value;
  }
  if (!version_seen) {
    return Status::InvalidArgument(file + ": no 'version = 1' line (every calibration file "
                                   "states its format version)");
  }

  Calibration calibration = BuiltIn();
  calibration.source_ = file;
  calibration.text_ = text;
  calibration.from_file_ = true;
  calibration.values_ = std::move(values);
  auto apply = [&](const std::string& transport, TransportCalibration base) {
    auto stated = calibration.values_.find(transport);
    if (stated != calibration.values_.end()) {
      for (const auto& [name, value] : stated->second) base.*(FindKey(name)->field) = value;
    }
    calibration.transports_[transport] = base;
  };
  // tcp first: a transport without a built-in entry starts from the file's tcp.
  apply("tcp", BuiltInTcp());
  apply("shm", BuiltInShm());
  for (const auto& entry : calibration.values_) {
    if (entry.first != "tcp" && entry.first != "shm") apply(entry.first, calibration.transports_["tcp"]);
  }
  return calibration;
}

Result<Calibration> Calibration::Load(const std::string& path, std::vector<std::string>* warnings) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::SystemError("cannot read calibration file " + path + ": " +
                               std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return Status::SystemError("cannot read calibration file " + path + ": " +
                               std::strerror(errno));
  }
  return Parse(text.str(), path, warnings);
}

const TransportCalibration& Calibration::Of(const char* transport) const {
  auto found = transports_.find(transport == nullptr ? "tcp" : transport);
  return found != transports_.end() ? found->second : transports_.at("tcp");
}

LinkModel Calibration::Model(const char* transport, bool oversubscribed,
                             double ranks_per_cpu) const {
  const TransportCalibration& t = Of(transport);
  LinkModel link;
  link.latency_us = oversubscribed ? t.latency_us : t.latency_us_core_per_rank;
  link.message_us = oversubscribed ? t.message_us : t.message_us_core_per_rank;
  link.bandwidth_gbps = t.bandwidth_gbps;
  link.reduce_gbps = t.reduce_gbps;
  link.memory_reduce_gbps = t.memory_reduce_gbps;
  link.cache_bytes = t.cache_bytes;
  link.pipeline_us = t.pipeline_us;
  link.fan_out_us = t.fan_out_us;
  link.shared_cores = oversubscribed;
  link.ranks_per_cpu = oversubscribed && ranks_per_cpu > 1.0 ? ranks_per_cpu : 1.0;
  // Not a measurement but what shared memory's code does (Connection::LandsInPlace), so it
  // stays out of the file.
  link.reduces_on_receive = transport != nullptr && std::strcmp(transport, "shm") == 0;
  // Inside a host ranks link over shared memory: what the steps and messages that stay inside a
  // host are priced with once the job spans hosts (LinkModel::intra_host_*).
  const TransportCalibration& shm = Of("shm");
  link.intra_host_latency_us = oversubscribed ? shm.latency_us : shm.latency_us_core_per_rank;
  link.intra_host_bandwidth_gbps = shm.bandwidth_gbps;
  link.intra_host_fan_out_us = shm.fan_out_us;
  link.intra_host_reduces_on_receive = true;
  // Reads of a peer's buffer only where every link is shared memory (the job's slowest transport
  // is shm, so one host) and only from the sizes where one copy measured faster.
  if (transport != nullptr && std::strcmp(transport, "shm") == 0) {
    const double own = t.single_copy_bytes, shared = t.single_copy_bytes_shared_cores;
    link.peer_read_gbps = t.single_copy_gbps;
    link.peer_read_min_bytes =
        !oversubscribed ? own : (own > 0 && shared > 0 ? std::max(own, shared) : 0);
  }
  return link;
}

std::string Calibration::Fingerprint() const {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a, 64 bits
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text) {
      hash ^= c;
      hash *= 1099511628211ull;
    }
  };
  for (const auto& [transport, numbers] : transports_) {
    for (const CalibrationKey& key : CalibrationKeys()) {
      mix(transport + "." + key.name + "=" + Number(numbers.*(key.field)) + "\n");
    }
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, hash);
  return text;
}

std::string Calibration::Serialize() const {
  std::string source = source_;
  for (char& c : source) {
    if (c == '\n') c = ' ';  // the source is one line of the record
  }
  return std::string(kRecordHeader) + "\n" + (from_file_ ? "file" : "built-in") + "\n" + source +
         "\n" + (from_file_ ? text_ : "");
}

Result<Calibration> Calibration::Deserialize(const std::string& record,
                                             const std::string& prefix) {
  const size_t header_end = record.find('\n');
  if (header_end == std::string::npos || record.compare(0, header_end, kRecordHeader) != 0) {
    return Status::InvalidArgument("a calibration record starts with '" +
                                   std::string(kRecordHeader) + "', this one with '" +
                                   record.substr(0, std::min<size_t>(header_end, 40)) + "'");
  }
  const size_t kind_end = record.find('\n', header_end + 1);
  const size_t source_end =
      kind_end == std::string::npos ? std::string::npos : record.find('\n', kind_end + 1);
  if (source_end == std::string::npos) {
    return Status::InvalidArgument("the calibration record is cut short (" +
                                   std::to_string(record.size()) + " bytes)");
  }
  const std::string kind = record.substr(header_end + 1, kind_end - header_end - 1);
  const std::string source = prefix + record.substr(kind_end + 1, source_end - kind_end - 1);
  if (kind == "built-in") {
    Calibration calibration = BuiltIn();
    calibration.source_ = source;
    return calibration;
  }
  if (kind != "file") {
    return Status::InvalidArgument("a calibration record says 'file' or 'built-in', not '" +
                                   kind + "'");
  }
  return Parse(record.substr(source_end + 1), source);
}

std::string FormatCalibration(const CalibrationValues& values, const std::string& comment) {
  std::ostringstream out;
  std::istringstream comment_lines(comment);
  for (std::string line; std::getline(comment_lines, line);) {
    out << (line.empty() ? "#" : "# " + line) << "\n";
  }
  out << "# Format: docs/ALGORITHMS.md, \"Calibration file\". A commented-out key keeps braid's\n"
      << "# built-in value, shown here for reference.\n"
      << "version = 1\n";
  const Calibration built_in = Calibration::BuiltIn();
  std::vector<std::string> transports = {"shm", "tcp"};
  for (const auto& entry : values) {
    if (entry.first != "shm" && entry.first != "tcp") transports.push_back(entry.first);
  }
  for (const std::string& transport : transports) {
    out << "\n";
    auto stated = values.find(transport);
    const TransportCalibration& base = built_in.Of(transport.c_str());
    for (const CalibrationKey& key : CalibrationKeys()) {
      const std::string name = transport + "." + key.name;
      const bool measured = stated != values.end() && stated->second.count(key.name) != 0;
      if (measured) {
        out << name << " = " << Number(stated->second.at(key.name)) << "  # " << key.meaning
            << "\n";
      } else {
        out << "# " << name << " = " << Number(base.*(key.field)) << "  (built-in: "
            << key.meaning << ")\n";
      }
    }
  }
  return out.str();
}

std::string CalibrationPath() {
  const char* named = std::getenv("BRAID_CALIBRATION");
  if (named != nullptr && *named != '\0') return std::strcmp(named, "none") == 0 ? "" : named;
  const char* cache = std::getenv("XDG_CACHE_HOME");
  if (cache != nullptr && *cache == '/') return std::string(cache) + "/braid/calibration";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return std::string(home) + "/.cache/braid/calibration";
  return "";
}

Calibration LoadCalibrationFromEnvironment() {
  const char* named = std::getenv("BRAID_CALIBRATION");
  const bool explicit_path = named != nullptr && *named != '\0';
  const std::string path = CalibrationPath();
  Calibration calibration = Calibration::BuiltIn();
  if (path.empty()) {
    BRAID_LOG(kInfo, -1) << "cost model calibration: " << calibration.source()
                         << (explicit_path ? "; BRAID_CALIBRATION=none"
                                           : "; no HOME, so no calibration file to look for");
    return calibration;
  }
  // No file where none was asked for is the usual case, not a problem worth a warning.
  if (!explicit_path && access(path.c_str(), F_OK) != 0 && errno == ENOENT) {
    BRAID_LOG(kInfo, -1) << "cost model calibration: " << calibration.source()
                         << "; no calibration file at " << path
                         << " (bench/calibrate --write makes one)";
    return calibration;
  }
  std::vector<std::string> warnings;
  Result<Calibration> loaded = Calibration::Load(path, &warnings);
  for (const std::string& warning : warnings) {
    BRAID_LOG(kWarn, -1) << "calibration file " << warning;
  }
  if (!loaded.ok()) {
    BRAID_LOG(kWarn, -1) << loaded.status().message() << "; the cost model uses the "
                         << calibration.source() << " numbers instead";
    return calibration;
  }
  calibration = std::move(loaded).value();
  BRAID_LOG(kInfo, -1) << "cost model calibration: " << calibration.source() << " (checksum "
                       << calibration.Fingerprint() << ")";
  return calibration;
}

const Calibration& ProcessCalibration() {
  static const Calibration calibration = LoadCalibrationFromEnvironment();
  return calibration;
}

LinkModel DefaultLinkModel(const Calibration& calibration, const char* transport,
                           bool oversubscribed, double ranks_per_cpu) {
  const LinkModel link = calibration.Model(transport, oversubscribed, ranks_per_cpu);
  BRAID_LOG(kInfo, -1) << "cost model: " << (transport != nullptr ? transport : "tcp")
                       << (oversubscribed ? ", ranks share cores (" : ", a core per rank")
                       << (oversubscribed ? Number(link.ranks_per_cpu) + " per CPU)" : "")
                       << ": latency " << link.latency_us << " us, message " << link.message_us
                       << " us, bandwidth " << link.bandwidth_gbps << " GB/s, reduce "
                       << link.reduce_gbps << " GB/s; from " << calibration.source()
                       << " (checksum " << calibration.Fingerprint() << ")";
  // The read family's price (cost::PeerReadRound): why the selector may or may not pick it.
  if (transport != nullptr && std::strcmp(transport, "shm") == 0) {
    std::string reads;
    if (link.peer_read_gbps <= 0) {
      reads = "not priced: the calibration has no single-copy rate (not measured, or "
              "cross-memory attach refused; bench/calibrate --write measures it)";
    } else if (link.peer_read_min_bytes <= 0) {
      reads = "not priced: one copy measured slower than the ring at every size (" +
              Number(link.peer_read_gbps) + " GB/s against " + Number(link.bandwidth_gbps) +
              " GB/s)";
    } else {
      reads = "priced at " + Number(link.peer_read_gbps) + " GB/s for blocks from " +
              Number(link.peer_read_min_bytes) + " bytes (ring " + Number(link.bandwidth_gbps) +
              " GB/s)";
    }
    BRAID_LOG(kInfo, -1) << "single-copy reads (BRAID_ALGO <collective>:read): " << reads;
  }
  return link;
}

}  // namespace braid::algorithms
