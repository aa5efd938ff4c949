#include "core/base/config.h"

#include <cerrno>
#include <cstdlib>
#include <mutex>

namespace braid {

Result<int64_t> IntFromEnvironment(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0) {
    return Status::InvalidArgument(std::string(name) + "='" + text +
                                   "' is not a non-negative integer");
  }
  return static_cast<int64_t>(value);
}

namespace {

Result<Config> ParseEnvironment() {
  Config config;
  BRAID_ASSIGN_OR_RETURN(config.timeout_ms, IntFromEnvironment("BRAID_TIMEOUT_MS", config.timeout_ms));
  int64_t chunk = 0;
  BRAID_ASSIGN_OR_RETURN(chunk, IntFromEnvironment("BRAID_CHUNK_BYTES", config.chunk_bytes));
  if (chunk < 64) return Status::InvalidArgument("BRAID_CHUNK_BYTES must be at least 64");
  config.chunk_bytes = static_cast<size_t>(chunk);
  int64_t device_chunk = 0;
  BRAID_ASSIGN_OR_RETURN(device_chunk, IntFromEnvironment("BRAID_DEVICE_CHUNK_BYTES", config.device_chunk_bytes));
  config.device_chunk_bytes = static_cast<size_t>(device_chunk);
  if (const char* v = std::getenv("BRAID_DEVICE_ALGO")) config.device_algo = v;
  if (!config.device_algo.empty() && config.device_algo != "direct" && config.device_algo != "staged") {
    return Status::InvalidArgument("BRAID_DEVICE_ALGO='" + config.device_algo + "' is neither direct nor staged");
  }
  if (const char* v = std::getenv("BRAID_SOCKET_IFNAME")) config.socket_ifname = v;
  if (const char* v = std::getenv("BRAID_SOCKET_FAMILY")) config.socket_family = v;
  if (!config.socket_family.empty() && config.socket_family != "AF_INET" &&
      config.socket_family != "AF_INET6") {
    return Status::InvalidArgument("BRAID_SOCKET_FAMILY='" + config.socket_family +
                                   "' is neither AF_INET nor AF_INET6");
  }
  if (const char* v = std::getenv("BRAID_TRANSPORTS")) config.transports = v;
  if (const char* v = std::getenv("BRAID_ALGO")) config.algo = v;
  int64_t check = 0;
  BRAID_ASSIGN_OR_RETURN(check, IntFromEnvironment("BRAID_CHECK", 0));
  if (check > 1) return Status::InvalidArgument("BRAID_CHECK must be 0 or 1");
  config.check = check == 1;
  int64_t tune = 1;
  BRAID_ASSIGN_OR_RETURN(tune, IntFromEnvironment("BRAID_TUNE", 1));
  if (tune > 2) return Status::InvalidArgument("BRAID_TUNE must be 0, 1 or 2");
  config.tune = static_cast<int>(tune);
  int64_t split_share = 0;
  BRAID_ASSIGN_OR_RETURN(split_share, IntFromEnvironment("BRAID_COMM_SPLIT_SHARE_RESOURCES", 0));
  if (split_share > 1) return Status::InvalidArgument("BRAID_COMM_SPLIT_SHARE_RESOURCES must be 0 or 1");
  config.split_share = split_share == 1;
  BRAID_ASSIGN_OR_RETURN(config.shm_single_copy_bytes,
                         IntFromEnvironment("BRAID_SHM_SINGLE_COPY_BYTES", -1));
  if (const char* v = std::getenv("BRAID_WAIT_POLICY")) config.wait_policy = v;
  if (!config.wait_policy.empty() && config.wait_policy != "auto" &&
      config.wait_policy != "spin" && config.wait_policy != "yield") {
    return Status::InvalidArgument("BRAID_WAIT_POLICY='" + config.wait_policy +
                                   "' is none of auto, spin, yield");
  }
  return config;
}

}  // namespace

Result<Config> ConfigFromEnvironment() {
  static std::once_flag once;
  static Result<Config>* parsed = nullptr;
  std::call_once(once, [] { parsed = new Result<Config>(ParseEnvironment()); });
  return *parsed;
}

}  // namespace braid
