// RegistrationCache over the verbs model's device: a range inside a registered one is found
// again, whole pages are registered, the least recently used region goes first beyond the
// capacity, a region still held stays registered after eviction, and BRAID_IB_REG_CACHE=0's
// mode keeps nothing. Expectations are counted by hand from the calls made.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/transport/ibverbs/verbs_model.h"
#include "transport/ibverbs/device.h"
#include "transport/ibverbs/registration_cache.h"

namespace braid::transport::ibverbs {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

std::unique_ptr<VerbsDevice> ModelDevice() {
  std::string why;
  Result<std::unique_ptr<VerbsDevice>> device =
      VerbsDevice::Open(braid::testing::verbs_model::ModelVerbsApi(), IbConfig{}, &why);
  REQUIRE(device.ok());
  REQUIRE(device.value() != nullptr);
  return std::move(device.value());
}

TEST_CASE("registration cache: ranges inside a region hit, whole pages are registered",
          "[verbs]") {
  std::unique_ptr<VerbsDevice> device = ModelDevice();
  {
    RegistrationCache cache(device->api(), device->pd(), true);
    std::vector<char> buffer(3 * kPage);
    Result<std::shared_ptr<Region>> first = cache.Find(buffer.data() + 10, kPage);
    REQUIRE(first.ok());
    const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer.data() + 10);
    CHECK(first.value()->begin() % kPage == 0);
    CHECK(first.value()->begin() <= begin);
    CHECK(first.value()->end() >= begin + kPage);
    CHECK(first.value()->end() % kPage == 0);
    Result<std::shared_ptr<Region>> inside = cache.Find(buffer.data() + 20, 100);
    REQUIRE(inside.ok());
    CHECK(inside.value() == first.value());
    CHECK(cache.misses() == 1);
    CHECK(cache.hits() == 1);
    // Past the region's end: a new, longer registration.
    Result<std::shared_ptr<Region>> longer = cache.Find(buffer.data() + 10, 2 * kPage + 100);
    REQUIRE(longer.ok());
    CHECK(longer.value()->end() >= begin + 2 * kPage + 100);
    CHECK(cache.misses() == 2);
  }
}

TEST_CASE("registration cache: beyond its capacity the least recently used region goes",
          "[verbs]") {
  std::unique_ptr<VerbsDevice> device = ModelDevice();
  {
    RegistrationCache cache(device->api(), device->pd(), true);
    const size_t n = RegistrationCache::kCapacity + 1;
    // One page apart with a page between, so no two buffers share a page.
    std::vector<char> arena((2 * n + 1) * kPage);
    auto page = [&](size_t i) {
      uintptr_t base = (reinterpret_cast<uintptr_t>(arena.data()) + kPage - 1) & ~(kPage - 1);
      return reinterpret_cast<char*>(base + 2 * i * kPage);
    };
    std::shared_ptr<Region> held;
    for (size_t i = 0; i + 1 < n; ++i) {
      Result<std::shared_ptr<Region>> region = cache.Find(page(i), 64);
      REQUIRE(region.ok());
      if (i == 0) held = region.value();
    }
    CHECK(cache.size() == RegistrationCache::kCapacity);
    REQUIRE(cache.Find(page(0), 64).ok());  // page 0 is now the most recently used
    CHECK(cache.hits() == 1);
    REQUIRE(cache.Find(page(n - 1), 64).ok());  // evicts page 1, the least recently used
    CHECK(cache.size() == RegistrationCache::kCapacity);
    const uint64_t misses = cache.misses();
    REQUIRE(cache.Find(page(0), 64).ok());
    CHECK(cache.misses() == misses);  // still there
    REQUIRE(cache.Find(page(1), 64).ok());
    CHECK(cache.misses() == misses + 1);  // was evicted
    // A region held by a caller stays usable whatever the cache dropped.
    CHECK(held->lkey() != 0);
  }
}

TEST_CASE("registration cache: off, every lookup registers and nothing is kept", "[verbs]") {
  std::unique_ptr<VerbsDevice> device = ModelDevice();
  {
    RegistrationCache cache(device->api(), device->pd(), false);
    std::vector<char> buffer(kPage);
    for (int i = 0; i < 3; ++i) REQUIRE(cache.Find(buffer.data(), 100).ok());
    CHECK(cache.misses() == 3);
    CHECK(cache.hits() == 0);
    CHECK(cache.size() == 0);
  }
}

}  // namespace
}  // namespace braid::transport::ibverbs
