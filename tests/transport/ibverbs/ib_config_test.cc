// BRAID_IB_HCA (NCCL's NCCL_IB_HCA syntax) and the other BRAID_IB_* variables: what each
// spelling selects, checked against expectations written out by hand from NCCL's documented
// rules (prefix match, ":port", "^" excludes, "=" exact), and every malformed value refused
// with the variable named.
#include <catch2/catch.hpp>
#include <string>

#include "transport/ibverbs/ib_config.h"

namespace braid::transport::ibverbs {
namespace {

bool Selects(const std::string& spec, const std::string& device, int port) {
  Result<HcaSpec> parsed = ParseHcaSpec(spec);
  REQUIRE(parsed.ok());
  return parsed.value().Selects(device, port);
}

TEST_CASE("BRAID_IB_HCA: empty selects every port", "[ib_config]") {
  CHECK(Selects("", "mlx5_0", 1));
  CHECK(Selects("  ", "anything", 2));
}

TEST_CASE("BRAID_IB_HCA: names are prefixes, ports optional", "[ib_config]") {
  CHECK(Selects("mlx5", "mlx5_0", 1));
  CHECK(Selects("mlx5", "mlx5_11", 2));
  CHECK_FALSE(Selects("mlx5", "mlx4_0", 1));
  CHECK(Selects("mlx5_0:1", "mlx5_0", 1));
  CHECK_FALSE(Selects("mlx5_0:1", "mlx5_0", 2));
  CHECK(Selects("mlx5_0:1,mlx5_1", "mlx5_1", 2));
  CHECK(Selects("mlx5_1:2", "mlx5_10", 2));  // a prefix: mlx5_10 starts with mlx5_1
  CHECK(Selects(" mlx5_0 : 1 , ", "mlx5_0", 1));
}

TEST_CASE("BRAID_IB_HCA: '=' matches whole names", "[ib_config]") {
  CHECK(Selects("=mlx5_1", "mlx5_1", 1));
  CHECK_FALSE(Selects("=mlx5_1", "mlx5_10", 1));
  CHECK_FALSE(Selects("=mlx5_1:1", "mlx5_1", 2));
}

TEST_CASE("BRAID_IB_HCA: '^' excludes", "[ib_config]") {
  CHECK_FALSE(Selects("^mlx5_0", "mlx5_0", 1));
  CHECK(Selects("^mlx5_0", "mlx4_0", 1));
  CHECK(Selects("^mlx5_0:1", "mlx5_0", 2));
  CHECK_FALSE(Selects("^mlx5_0:1", "mlx5_0", 1));
  CHECK_FALSE(Selects("^mlx5_1", "mlx5_10", 1));  // excluded as a prefix
  CHECK(Selects("^=mlx5_1", "mlx5_10", 1));       // but not when exact
  CHECK_FALSE(Selects("^=mlx5_1", "mlx5_1", 1));
}

TEST_CASE("BRAID_IB_HCA: malformed entries are refused naming the variable", "[ib_config]") {
  for (const char* bad : {":1", "mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", "a,:2"}) {
    Result<HcaSpec> parsed = ParseHcaSpec(bad);
    INFO(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == Code::kInvalidArgument);
    CHECK(parsed.status().message().find("BRAID_IB_HCA") != std::string::npos);
  }
}

TEST_CASE("BRAID_IB_*: defaults and ranges", "[ib_config]") {
  Result<IbConfig> defaults = ParseIbConfig(nullptr, nullptr, nullptr, nullptr);
  REQUIRE(defaults.ok());
  CHECK(defaults.value().gid_index == 0);
  CHECK(defaults.value().timeout == 20);
  CHECK(defaults.value().retry_cnt == 7);
  CHECK(defaults.value().hca.entries.empty());

  Result<IbConfig> set = ParseIbConfig("mlx5_0:1", "3", "14", "0");
  REQUIRE(set.ok());
  CHECK(set.value().gid_index == 3);
  CHECK(set.value().timeout == 14);
  CHECK(set.value().retry_cnt == 0);
  REQUIRE(set.value().hca.entries.size() == 1);
  CHECK(set.value().hca.entries[0].port == 1);

  struct Bad {
    const char* gid;
    const char* timeout;
    const char* retry;
    const char* variable;
  };
  for (const Bad& bad : {Bad{"256", nullptr, nullptr, "BRAID_IB_GID_INDEX"},
                         Bad{"-1", nullptr, nullptr, "BRAID_IB_GID_INDEX"},
                         Bad{nullptr, "0", nullptr, "BRAID_IB_TIMEOUT"},
                         Bad{nullptr, "32", nullptr, "BRAID_IB_TIMEOUT"},
                         Bad{nullptr, "fast", nullptr, "BRAID_IB_TIMEOUT"},
                         Bad{nullptr, nullptr, "8", "BRAID_IB_RETRY_CNT"}}) {
    Result<IbConfig> parsed = ParseIbConfig(nullptr, bad.gid, bad.timeout, bad.retry);
    INFO(bad.variable);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == Code::kInvalidArgument);
    CHECK(parsed.status().message().find(bad.variable) != std::string::npos);
  }
}

}  // namespace
}  // namespace braid::transport::ibverbs
