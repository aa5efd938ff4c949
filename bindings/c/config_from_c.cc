#include "bindings/c/config_from_c.h"

#include <cstddef>

namespace braid::capi {

Result<Config> ConfigFromC(const braidConfig_t* c) {
  Config config;
  BRAID_ASSIGN_OR_RETURN(config, ConfigFromEnvironment());
  if (c == nullptr) return config;
  if (c->magic != BRAID_CONFIG_MAGIC) {
    return Status::InvalidArgument(
        "config was not initialized with BRAID_CONFIG_INITIALIZER (bad magic)");
  }
  // Older headers make smaller structs: read only the fields that caller's struct has.
  if (c->size < offsetof(braidConfig_t, transports) + sizeof(c->transports)) {
    return Status::InvalidArgument("config->size " + std::to_string(c->size) +
                                   " is smaller than any braidConfig_t this version knows");
  }
  if (c->timeoutMs != BRAID_CONFIG_UNDEF_INT) {
    if (c->timeoutMs <= 0) {
      return Status::InvalidArgument("config->timeoutMs must be positive, got " +
                                     std::to_string(c->timeoutMs));
    }
    config.timeout_ms = c->timeoutMs;
  }
  if (c->chunkBytes != BRAID_CONFIG_UNDEF_INT) {
    if (c->chunkBytes < 64) {
      return Status::InvalidArgument("config->chunkBytes must be at least 64, got " +
                                     std::to_string(c->chunkBytes));
    }
    config.chunk_bytes = static_cast<size_t>(c->chunkBytes);
  }
  if (c->socketIfname != BRAID_CONFIG_UNDEF_PTR) config.socket_ifname = c->socketIfname;
  if (c->transports != BRAID_CONFIG_UNDEF_PTR) config.transports = c->transports;
  // checkMode arrived after the first release of the struct: older callers' structs end earlier.
  if (c->size >= offsetof(braidConfig_t, checkMode) + sizeof(c->checkMode) &&
      c->checkMode != BRAID_CONFIG_UNDEF_INT) {
    if (c->checkMode != 0 && c->checkMode != 1) {
      return Status::InvalidArgument("config->checkMode must be 0 or 1, got " +
                                     std::to_string(c->checkMode));
    }
    config.check = c->checkMode == 1;
  }
  if (c->size >= offsetof(braidConfig_t, splitShare) + sizeof(c->splitShare) &&
      c->splitShare != BRAID_CONFIG_UNDEF_INT) {
    if (c->splitShare != 0 && c->splitShare != 1) {
      return Status::InvalidArgument("config->splitShare must be 0 or 1, got " +
                                     std::to_string(c->splitShare));
    }
    config.split_share = c->splitShare == 1;
  }
  // algo came after splitShare. The communicator parses it (as it parses BRAID_ALGO), so a bad
  // value fails creation with InvalidArgument quoting it, whichever of the two it came from.
  if (c->size >= offsetof(braidConfig_t, algo) + sizeof(c->algo) &&
      c->algo != BRAID_CONFIG_UNDEF_PTR) {
    config.algo = c->algo;
  }
  if (c->size >= offsetof(braidConfig_t, shmSingleCopyBytes) + sizeof(c->shmSingleCopyBytes) &&
      c->shmSingleCopyBytes != BRAID_CONFIG_UNDEF_INT) {
    if (c->shmSingleCopyBytes < 0) {
      return Status::InvalidArgument("config->shmSingleCopyBytes must be 0 (never) or a byte "
                                     "count, got " + std::to_string(c->shmSingleCopyBytes));
    }
    config.shm_single_copy_bytes = c->shmSingleCopyBytes;
  }
  if (c->size >= offsetof(braidConfig_t, deviceChunkBytes) + sizeof(c->deviceChunkBytes) &&
      c->deviceChunkBytes != BRAID_CONFIG_UNDEF_INT) {
    if (c->deviceChunkBytes < 0) {
      return Status::InvalidArgument("config->deviceChunkBytes must be 0 (whole messages) or a byte "
                                     "count, got " + std::to_string(c->deviceChunkBytes));
    }
    config.device_chunk_bytes = static_cast<size_t>(c->deviceChunkBytes);
  }
  if (c->size >= offsetof(braidConfig_t, deviceAlgo) + sizeof(c->deviceAlgo) &&
      c->deviceAlgo != BRAID_CONFIG_UNDEF_PTR) {
    const std::string algo = c->deviceAlgo;
    if (!algo.empty() && algo != "direct" && algo != "staged") {
      return Status::InvalidArgument("config->deviceAlgo must be \"direct\" or \"staged\", got \"" + algo + "\"");
    }
    config.device_algo = algo;
  }
  return config;
}

}  // namespace braid::capi
