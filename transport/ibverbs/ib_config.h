// The verbs transport's settings from the environment, and which device port BRAID_IB_HCA picks.
//
// | variable            | default | meaning                                                      |
// | BRAID_IB_HCA        | ""      | NCCL's NCCL_IB_HCA syntax: "mlx5_0:1,mlx5_1" (name prefixes, |
// |                     |         | optional :port), "^mlx5_1" excludes, "=mlx5_0" exact names   |
// |                     |         | ("^=" both). Empty: the first active port of any device.     |
// | BRAID_IB_GID_INDEX  | 0       | GID table index used for RoCE (0-255)                         |
// | BRAID_IB_TIMEOUT    | 20      | local ACK timeout exponent: 4.096 us * 2^value (1-31)        |
// | BRAID_IB_RETRY_CNT  | 7       | transport retries before a send fails (0-7)                  |
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace braid::transport::ibverbs {

// A parsed BRAID_IB_HCA.
struct HcaSpec {
  struct Entry {
    std::string name;  // a prefix of the device name, or the whole name when `exact`
    int port = -1;     // -1: any port
  };
  bool exclude = false;  // "^": every port except the ones listed
  bool exact = false;    // "=": names must match whole
  std::vector<Entry> entries;  // empty: everything

  // Whether port `port` of device `device` is selected. Pure.
  bool Selects(const std::string& device, int port) const;
};

// Parses NCCL's HCA syntax (blanks ignored). Errors (kInvalidArgument, naming BRAID_IB_HCA and the
// offending entry): an empty name before ':', a port that is not a number in 1-255.
Result<HcaSpec> ParseHcaSpec(const std::string& text);

struct IbConfig {
  HcaSpec hca;
  int gid_index = 0;
  int timeout = 20;
  int retry_cnt = 7;
};

// Reads the variables above; an unparsable or out-of-range value is kInvalidArgument naming the
// variable, its value and the range.
Result<IbConfig> IbConfigFromEnvironment();

// The same from explicit values (nullptr = unset), for tests.
Result<IbConfig> ParseIbConfig(const char* hca, const char* gid_index, const char* timeout,
                               const char* retry_cnt);

}  // namespace braid::transport::ibverbs
