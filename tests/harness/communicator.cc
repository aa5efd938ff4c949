#include "tests/harness/communicator.h"

#include <exception>
#include <mutex>

namespace braid::testing {

braidUniqueId NewId() {
  braidUniqueId id;
  const braidResult_t rc = braidGetUniqueId(&id);
  INFO(braidGetLastError(nullptr));
  REQUIRE(rc == braidSuccess);
  return id;
}

std::string Describe(const CommJob& job) {
  const braidConfig_t& c = job.config;
  std::string s = std::to_string(job.size) + (job.size == 1 ? " rank" : " ranks") +
                  (job.ranks == Ranks::kThreads ? " as threads" : " as processes");
  if (c.transports != nullptr) s += std::string(", transports ") + c.transports;
  if (c.algo != nullptr) s += std::string(", algo ") + (*c.algo ? c.algo : "\"\"");
  if (c.chunkBytes != BRAID_CONFIG_UNDEF_INT) s += ", chunk " + std::to_string(c.chunkBytes);
  return s;
}

std::vector<std::string> RunComms(const CommJob& job, const CommBody& body) {
  const braidUniqueId id = NewId();
  braidConfig_t config = job.config;
  if (config.timeoutMs == BRAID_CONFIG_UNDEF_INT) config.timeoutMs = kOperationTimeoutMs;

  // Thread ranks publish their communicator so a timeout can abort it; the mutex keeps an abort
  // from racing the rank's own destroy.
  std::mutex mutex;
  std::vector<braidComm_t> live(job.size, nullptr);
  const bool threads = job.ranks == Ranks::kThreads;

  auto rank_body = [&](int rank, int size) -> std::string {
    braidComm_t comm = nullptr;
    const braidResult_t rc = braidCommInitRankConfig(&comm, size, id, rank, &config);
    if (rc != braidSuccess) {
      return std::string("init failed: ") + braidGetErrorString(rc) + ": " +
             braidGetLastError(nullptr);
    }
    if (threads) {
      std::lock_guard<std::mutex> lock(mutex);
      live[rank] = comm;
    }
    std::string result;
    try {
      result = body(comm, rank, size);
    } catch (const std::exception& e) {  // caught here so the communicator is still destroyed
      result = std::string("exception: ") + e.what();
    } catch (...) {
      result = "unknown exception";
    }
    if (threads) {
      std::lock_guard<std::mutex> lock(mutex);
      live[rank] = nullptr;
    }
    braidCommDestroy(comm);
    return result;
  };

  if (!threads) return RunProcesses(job.size, rank_body, job.timeout_ms);
  return RunThreads(job.size, rank_body, job.timeout_ms, [&](const std::vector<int>& stuck) {
    std::lock_guard<std::mutex> lock(mutex);
    for (int rank : stuck) {
      if (live[rank] != nullptr) braidCommAbort(live[rank]);
    }
  });
}

}  // namespace braid::testing
