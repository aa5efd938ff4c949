#include "transport/ibverbs/ib_config.h"

#include <cstdlib>

namespace braid::transport::ibverbs {
namespace {

std::string WithoutBlanks(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c != ' ' && c != '\t') out += c;
  }
  return out;
}

// A whole decimal number in [low, high], else an error naming `variable`.
Result<int> ParseInt(const char* variable, const std::string& text, int low, int high) {
  std::string trimmed = WithoutBlanks(text);
  bool digits = !trimmed.empty() && trimmed.size() <= 9;
  for (char c : trimmed) digits = digits && c >= '0' && c <= '9';
  int value = digits ? std::atoi(trimmed.c_str()) : -1;
  if (!digits || value < low || value > high) {
    return Status::InvalidArgument(std::string(variable) + "='" + text + "' is not a number in " +
                                   std::to_string(low) + "-" + std::to_string(high));
  }
  return value;
}

Result<int> IntOr(const char* variable, const char* text, int fallback, int low, int high) {
  if (text == nullptr || WithoutBlanks(text).empty()) return fallback;
  return ParseInt(variable, text, low, high);
}

}  // namespace

bool HcaSpec::Selects(const std::string& device, int port) const {
  if (entries.empty()) return true;
  bool listed = false;
  for (const Entry& entry : entries) {
    bool name_matches = exact ? device == entry.name : device.compare(0, entry.name.size(),
                                                                      entry.name) == 0;
    if (name_matches && (entry.port == -1 || entry.port == port)) listed = true;
  }
  return exclude ? !listed : listed;
}

Result<HcaSpec> ParseHcaSpec(const std::string& text) {
  HcaSpec spec;
  std::string rest = WithoutBlanks(text);
  if (!rest.empty() && rest[0] == '^') {
    spec.exclude = true;
    rest.erase(0, 1);
  }
  if (!rest.empty() && rest[0] == '=') {
    spec.exact = true;
    rest.erase(0, 1);
  }
  size_t start = 0;
  while (start < rest.size()) {
    size_t comma = rest.find(',', start);
    if (comma == std::string::npos) comma = rest.size();
    std::string item = rest.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    HcaSpec::Entry entry;
    size_t colon = item.find(':');
    entry.name = item.substr(0, colon);
    if (entry.name.empty()) {
      return Status::InvalidArgument("BRAID_IB_HCA='" + text + "': entry '" + item +
                                     "' has no device name");
    }
    if (colon != std::string::npos) {
      Result<int> port = ParseInt("BRAID_IB_HCA port", item.substr(colon + 1), 1, 255);
      if (!port.ok()) {
        return Status::InvalidArgument("BRAID_IB_HCA='" + text + "': entry '" + item +
                                       "' has a port that is not a number in 1-255");
      }
      entry.port = port.value();
    }
    spec.entries.push_back(entry);
  }
  return spec;
}

Result<IbConfig> ParseIbConfig(const char* hca, const char* gid_index, const char* timeout,
                               const char* retry_cnt) {
  IbConfig config;
  BRAID_ASSIGN_OR_RETURN(config.hca, ParseHcaSpec(hca == nullptr ? "" : hca));
  BRAID_ASSIGN_OR_RETURN(config.gid_index, IntOr("BRAID_IB_GID_INDEX", gid_index, 0, 0, 255));
  // 0 would mean "wait forever for an ACK" in the verbs spec: a vanished peer must fail a send.
  BRAID_ASSIGN_OR_RETURN(config.timeout, IntOr("BRAID_IB_TIMEOUT", timeout, 20, 1, 31));
  BRAID_ASSIGN_OR_RETURN(config.retry_cnt, IntOr("BRAID_IB_RETRY_CNT", retry_cnt, 7, 0, 7));
  return config;
}

Result<IbConfig> IbConfigFromEnvironment() {
  return ParseIbConfig(std::getenv("BRAID_IB_HCA"), std::getenv("BRAID_IB_GID_INDEX"),
                       std::getenv("BRAID_IB_TIMEOUT"), std::getenv("BRAID_IB_RETRY_CNT"));
}

}  // namespace braid::transport::ibverbs
