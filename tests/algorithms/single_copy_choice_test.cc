// The shm single-copy choice (algorithms/single_copy_choice.h): a configured value wins, else the
// calibration file's measurement decides, else none; the reason names where the answer came
// from and what was measured.
#include "algorithms/single_copy_choice.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

namespace braid::algorithms {
namespace {

Calibration File(const std::string& shm_lines) {
  Result<Calibration> parsed = Calibration::Parse("version = 1\n" + shm_lines, "host.cal");
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return std::move(parsed).value();
}

bool Says(const std::string& why, const std::string& text) {
  INFO(why);
  return why.find(text) != std::string::npos;
}

TEST_CASE("single copy choice: a configured value wins over the calibration", "[single_copy]") {
  const Calibration measured = File("shm.single_copy_bytes = 262144\n");
  for (int64_t configured : {int64_t{0}, int64_t{1}, int64_t{65536}}) {
    const SingleCopyChoice choice = ChooseShmSingleCopy(configured, measured, 2, 2);
    CHECK(choice.min_bytes == configured);
    CHECK(Says(choice.why, "BRAID_SHM_SINGLE_COPY_BYTES"));
  }
}

TEST_CASE("single copy choice: without a measurement, the ring, and how to measure",
          "[single_copy]") {
  for (const Calibration& calibration : {Calibration::BuiltIn(), File("shm.bandwidth_gbps = 3\n")}) {
    const SingleCopyChoice choice = ChooseShmSingleCopy(-1, calibration, 2, 2);
    CHECK(choice.min_bytes == 0);
    CHECK(Says(choice.why, "no single-copy measurement"));
    CHECK(Says(choice.why, "bench/calibrate --write"));
    CHECK(Says(choice.why, calibration.source()));
  }
}

TEST_CASE("single copy choice: the measured crossover and rates, the ring, or a refusal",
          "[single_copy]") {
  SECTION("single copy wins from 256 KiB") {
    const SingleCopyChoice choice = ChooseShmSingleCopy(
        -1, File("shm.single_copy_bytes = 262144\nshm.single_copy_gbps = 9.5\n"
                 "shm.bandwidth_gbps = 6.25\n"),
        2, 2);
    CHECK(choice.min_bytes == 262144);
    CHECK(Says(choice.why, "single copy was faster from 256 KiB up"));
    CHECK(Says(choice.why, "single copy 9.5 GB/s, ring 6.25 GB/s"));
    CHECK(Says(choice.why, "host.cal"));
    CHECK(DescribeSingleCopy(choice.min_bytes) == "single copy (process_vm_readv) from 256 KiB");
  }
  SECTION("the ring wins everywhere") {
    const SingleCopyChoice choice = ChooseShmSingleCopy(
        -1, File("shm.single_copy_bytes = 0\nshm.single_copy_gbps = 2.5\n"), 2, 2);
    CHECK(choice.min_bytes == 0);
    CHECK(Says(choice.why, "the ring was faster at every size measured"));
    CHECK(DescribeSingleCopy(choice.min_bytes) == "the ring (two copies) at every size");
  }
  SECTION("cross-memory attach was refused where it was measured") {
    const SingleCopyChoice choice = ChooseShmSingleCopy(
        -1, File("shm.single_copy_bytes = 0\nshm.single_copy_gbps = 0\n"), 2, 2);
    CHECK(choice.min_bytes == 0);
    CHECK(Says(choice.why, "refused"));
  }
  SECTION("more ranks than CPUs take the shared-cores measurement") {
    const Calibration both = File(
        "shm.single_copy_bytes = 262144\nshm.single_copy_bytes_shared_cores = 0\n"
        "shm.single_copy_gbps = 9.5\n");
    const SingleCopyChoice own = ChooseShmSingleCopy(-1, both, 4, 4);
    CHECK(own.min_bytes == 262144);
    CHECK(Says(own.why, "a CPU per rank"));
    const SingleCopyChoice shared = ChooseShmSingleCopy(-1, both, 4, 2);
    CHECK(shared.min_bytes == 0);
    CHECK(Says(shared.why, "4 ranks, 2 CPUs: ranks may share CPUs, so both measurements"));
    CHECK(Says(shared.why, "the ring was faster"));
    // Sharing CPUs takes single copy only where both measurements favour it.
    const Calibration shared_only = File(
        "shm.single_copy_bytes = 0\nshm.single_copy_bytes_shared_cores = 65536\n"
        "shm.single_copy_gbps = 3\n");
    const SingleCopyChoice refused_by_one = ChooseShmSingleCopy(-1, shared_only, 4, 2);
    CHECK(refused_by_one.min_bytes == 0);
    CHECK(Says(refused_by_one.why, "the ring was faster at every size with a CPU per rank"));
    const Calibration both_win = File(
        "shm.single_copy_bytes = 262144\nshm.single_copy_bytes_shared_cores = 65536\n"
        "shm.single_copy_gbps = 3\n");
    CHECK(ChooseShmSingleCopy(-1, both_win, 4, 2).min_bytes == 262144);
    CHECK(ChooseShmSingleCopy(-1, both_win, 2, 2).min_bytes == 262144);
    // A file from before the shared-cores key: no measurement for that case, so the ring.
    const SingleCopyChoice old = ChooseShmSingleCopy(-1, File("shm.single_copy_bytes = 4096\n"), 3, 2);
    CHECK(old.min_bytes == 0);
    CHECK(Says(old.why, "no single-copy measurement"));
  }
  SECTION("the CPUs online: at least one, at most those configured") {
    CHECK(OnlineCpuCount() >= 1);
    CHECK(OnlineCpuCount() <= sysconf(_SC_NPROCESSORS_CONF));
  }
  SECTION("an odd byte count is described in bytes") {
    CHECK(DescribeSingleCopy(4097) == "single copy (process_vm_readv) from 4097 bytes");
    CHECK(DescribeSingleCopy(int64_t{4} << 20) == "single copy (process_vm_readv) from 4 MiB");
  }
}

}  // namespace
}  // namespace braid::algorithms
