// Turns a braidConfig_t (which may be NULL) into braid's Config: environment values first, then
// every field the caller set away from BRAID_CONFIG_INITIALIZER's "undefined".
#pragma once

#include "bindings/c/braid.h"
#include "core/base/config.h"
#include "core/base/status.h"

namespace braid::capi {

Result<Config> ConfigFromC(const braidConfig_t* config);

}  // namespace braid::capi
