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
  if (c.shmSingleCopyBytes != BRAID_CONFIG_UNDEF_INT) {
    s += ", shm single copy from " + std::to_string(c.shmSingleCopyBytes) + " bytes";
  }
  if (c.deviceChunkBytes != BRAID_CONFIG_UNDEF_INT) s += ", device chunk " + std::to_string(c.deviceChunkBytes);
  if (c.deviceAlgo != BRAID_CONFIG_UNDEF_PTR) s += std::string(", device algo ") + c.deviceAlgo;
  return s;
}

std::vector<braidUniqueId> NewIds(int n) {
  std::vector<braidUniqueId> ids;
  for (int i = 0; i < n; ++i) ids.push_back(NewId());
  return ids;
}

std::vector<std::string> RunCommSets(const CommJob& job, const CommSetBody& body) {
  const std::vector<braidUniqueId> ids = job.ids.empty() ? NewIds(1) : job.ids;
  const int count = static_cast<int>(ids.size());
  braidConfig_t config = job.config;
  if (config.timeoutMs == BRAID_CONFIG_UNDEF_INT) config.timeoutMs = kOperationTimeoutMs;

  // Thread ranks publish their communicators so a timeout can abort them; the mutex keeps an
  // abort from racing the rank's own destroy.
  std::mutex mutex;
  std::vector<std::vector<braidComm_t>> live(job.size);
  const bool threads = job.ranks == Ranks::kThreads;

  auto rank_body = [&](int rank, int size) -> std::string {
    std::vector<braidComm_t> comms;
    // Destroys what this rank made (unless the body owns it) and unpublishes it; returns what
    // failed, if `result` does not already say what went wrong.
    auto finish = [&](std::string result, bool destroy) {
      if (threads) {
        std::lock_guard<std::mutex> lock(mutex);
        live[rank].clear();
      }
      if (!destroy) return result;
      for (size_t i = 0; i < comms.size(); ++i) {
        const braidResult_t rc = braidCommDestroy(comms[i]);
        if (rc != braidSuccess && result.empty()) {
          result = "destroy" + (count > 1 ? " (communicator " + std::to_string(i) + ")" : "") +
                   ": " + braidGetErrorString(rc) + ": " + braidGetLastError(nullptr);
        }
      }
      return result;
    };
    for (int i = 0; i < count; ++i) {
      if (job.before_init) {
        std::string ready;
        try {
          ready = job.before_init(rank, i);
        } catch (const std::exception& e) {
          ready = std::string("before_init: exception: ") + e.what();
        }
        if (!ready.empty()) return finish(ready, true);
      }
      braidComm_t comm = nullptr;
      const braidResult_t rc = braidCommInitRankConfig(&comm, size, ids[i], rank, &config);
      if (rc != braidSuccess) {
        const std::string which =
            count > 1 ? " (communicator " + std::to_string(i) + " of " + std::to_string(count) + ")"
                      : "";
        return finish(std::string("init failed") + which + ": " + braidGetErrorString(rc) + ": " +
                          braidGetLastError(nullptr),
                      true);
      }
      comms.push_back(comm);
      if (threads) {
        std::lock_guard<std::mutex> lock(mutex);
        live[rank].push_back(comm);
      }
    }
    std::string result;
    try {
      result = body(comms, rank, size);
    } catch (const std::exception& e) {  // caught here so the communicators are still destroyed
      result = std::string("exception: ") + e.what();
    } catch (...) {
      result = "unknown exception";
    }
    return finish(result, !job.body_destroys);
  };

  if (!threads) return RunProcesses(job.size, rank_body, job.timeout_ms);
  return RunThreads(job.size, rank_body, job.timeout_ms, [&](const std::vector<int>& stuck) {
    std::lock_guard<std::mutex> lock(mutex);
    for (int rank : stuck) {
      for (braidComm_t comm : live[rank]) braidCommAbort(comm);
    }
  });
}

std::vector<std::string> RunComms(const CommJob& job, const CommBody& body) {
  REQUIRE(job.ids.size() <= 1);  // several communicators per rank: RunCommSets
  return RunCommSets(job, [&](const std::vector<braidComm_t>& comms, int rank, int size) {
    return body(comms[0], rank, size);
  });
}

braidComm_t OneRankComm() {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutMs = kOperationTimeoutMs;
  braidComm_t comm = nullptr;
  const braidResult_t rc = braidCommInitRankConfig(&comm, 1, NewId(), 0, &config);
  INFO(braidGetLastError(nullptr));
  REQUIRE(rc == braidSuccess);
  REQUIRE(comm != nullptr);
  return comm;
}

}  // namespace braid::testing
