// The goodbye and the store host's death (issue 20, docs/FAILURES.md).
//
// 1. Goodbye: a transport aborted because of a failure tells each open link why before it
//    closes, so the peer's error says "rank 0 closed the link and said why: rank 2 is gone ..."
//    rather than a bare end of file, with no store involved; a link closed without a failure (a
//    destroyed connection) says nothing more than before. tcp and shm, through the registry.
// 2. The rank hosting the env:// store dies (SIGKILL of rank 0, whose process runs the store):
//    no survivor can read a cause record any more, yet every one says first that rank 0 is gone
//    and that the store at host:port it hosted no longer answers — its ring neighbours from the
//    lost link and the dead store, the others from their neighbours' goodbyes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/faults/message_reading.h"
#include "tests/harness/free_port.h"
#include "tests/harness/multi_rank.h"
#include "transport/registry.h"

namespace {

using braid::Code;
using braid::Deadline;
using braid::Status;
using braid::transport::Connection;
using braid::transport::Transport;
using braid::testing::FirstRankNamed;
using braid::testing::FreePort;

constexpr int64_t kTestTimeoutMs = 20000;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Two ranks of one transport (threads of this process), linked: links[r] is rank r's link.
struct Pair {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<std::unique_ptr<Connection>> links;
  std::string error;
};

Pair MakePair(const std::string& name) {
  Pair pair;
  static std::atomic<uint64_t> next{0};
  const uint64_t comm_id = (static_cast<uint64_t>(getpid()) << 32) + (++next);
  for (const braid::transport::TransportFactory& factory : braid::transport::TransportFactories()) {
    if (factory.name != name || factory.create == nullptr) continue;
    for (int rank = 0; rank < 2; ++rank) {
      braid::transport::TransportContext context;
      context.rank = rank;
      context.size = 2;
      context.comm_id = comm_id;
      context.secret = "goodbye-test";
      context.config.socket_ifname = "lo";
      auto created = factory.create(context);
      if (!created.ok() || created.value() == nullptr) {
        pair.error = name + " not available: " +
                     (created.ok() ? std::string("no transport") : created.status().ToString());
        return pair;
      }
      pair.transports.push_back(std::move(created.value()));
    }
  }
  if (pair.transports.size() != 2) {
    pair.error = "no transport named " + name;
    return pair;
  }
  pair.links.resize(2);
  std::mutex mutex;
  auto results = braid::testing::RunThreads(
      2,
      [&](int rank, int) -> std::string {
        auto link = pair.transports[rank]->Connect(1 - rank, pair.transports[1 - rank]->LocalAddress(),
                                                   Deadline::AfterMs(kTestTimeoutMs));
        if (!link.ok()) return link.status().ToString();
        std::lock_guard<std::mutex> lock(mutex);
        pair.links[rank] = std::move(link.value());
        return "";
      },
      2 * kTestTimeoutMs, [&](const std::vector<int>&) {
        for (auto& t : pair.transports) t->Abort(Status::Aborted("set-up hung"));
      });
  pair.error = braid::testing::Failures(results);
  return pair;
}

// The root cause as a communicator of rank 0 would abort its links with it.
const char* const kReason =
    "rank 2 is gone (seen by rank 0); rank 0's own view: rank 0: allreduce #3 (...): receiving "
    "message 1 from rank 2: rank 0: connection to rank 2 lost: end of file";

}  // namespace

TEST_CASE("a rank whose transport is aborted tells its peers why", "[faults][goodbye]") {
  const std::string name = GENERATE(as<std::string>(), "tcp", "shm");
  // pending: rank 1 waits in a receive; probe: rank 1 has nothing posted and probes the link.
  const std::string how = GENERATE(as<std::string>(), "pending", "probe");
  CAPTURE(name, how);
  Pair pair = MakePair(name);
  REQUIRE(pair.error.empty());
  char buffer[64];
  braid::transport::RequestPtr pending;
  if (how == "pending") pending = pair.links[1]->PostRecv(buffer, sizeof(buffer), 7);
  pair.transports[0]->Abort(Status::Aborted(kReason));
  Status seen;
  if (how == "pending") {
    seen = pending->Wait(Deadline::AfterMs(kTestTimeoutMs));
  } else {
    // The loss reaches the link a moment after the abort; poll until it does.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < give_up) {
      auto probed = pair.links[1]->Probe();
      if (!probed.ok()) {
        seen = probed.status();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  INFO(seen.ToString());
  CHECK(seen.code() == Code::kRemoteError);
  CHECK(Has(seen.message(), "connection to rank 0 lost: rank 0 closed the link and said why: " +
                                std::string(kReason)));
}

TEST_CASE("a link closed without a failure says no goodbye", "[faults][goodbye]") {
  const std::string name = GENERATE(as<std::string>(), "tcp", "shm");
  CAPTURE(name);
  Pair pair = MakePair(name);
  REQUIRE(pair.error.empty());
  char buffer[64];
  auto pending = pair.links[1]->PostRecv(buffer, sizeof(buffer), 7);
  pair.links[0].reset();  // destroyed: the peer sees the link close, with nothing said
  Status seen = pending->Wait(Deadline::AfterMs(kTestTimeoutMs));
  INFO(seen.ToString());
  CHECK(seen.code() == Code::kRemoteError);
  CHECK(Has(seen.message(), "connection to rank 0 lost"));
  CHECK_FALSE(Has(seen.message(), "said why"));
}

TEST_CASE("survivors of the env:// store host's death name it and the store",
          "[faults][rootcause][store]") {
  const char* transports = GENERATE("tcp", "shm");
  CAPTURE(transports);
  constexpr int kRanks = 4;  // rank 2 is no neighbour of rank 0: it learns through a goodbye
  const int port = FreePort();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  auto results = braid::testing::RunProcesses(
      kRanks,
      [&](int rank, int size) -> std::string {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
        setenv("BRAID_SECRET", "store-host-test", 1);
        unsetenv("BRAID_STORE_HOSTED");
        braidConfig_t config = BRAID_CONFIG_INITIALIZER;
        config.timeoutMs = 600000;  // the death must be detected, not waited out
        config.transports = transports;
        braidComm_t comm = nullptr;
        if (braidCommInitEnv(&comm, &config) != braidSuccess) {
          return std::string("init: ") + braidGetLastError(nullptr);
        }
        std::vector<float> send(256 * 1024, 1.0f), recv(256 * 1024, 0.0f);
        if (braidAllReduce(send.data(), recv.data(), send.size(), braidFloat32, braidSum, comm,
                           nullptr) != braidSuccess) {
          return std::string("warm-up allreduce: ") + braidGetLastError(comm);
        }
        if (rank == 0) {
          std::thread([] {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            kill(getpid(), SIGKILL);  // the store, which this process hosts, dies with it
          }).detach();
        }
        const auto start = std::chrono::steady_clock::now();
        braidResult_t rc = braidSuccess;
        double seconds = 0;
        while (rc == braidSuccess && seconds < 10.0) {
          rc = braidAllReduce(send.data(), recv.data(), send.size(), braidFloat32, braidSum, comm,
                              nullptr);
          seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        const std::string message = braidGetLastError(comm);
        std::fprintf(stderr, "[%s, store host dies] rank %d after %.2f s: %s\n", transports, rank,
                     seconds, message.c_str());
        std::string failure;
        if (rank == 0) {
          failure = "rank 0 outlived its SIGKILL";
        } else if (rc != braidRemoteError) {
          failure = "expected braidRemoteError, got " + std::to_string(rc) + ": " + message;
        } else if (seconds > 10.0) {
          failure = "noticed only after " + std::to_string(seconds) + " s: " + message;
        } else if (FirstRankNamed(message) != 0) {
          failure = "the first rank named is not rank 0: " + message;
        } else if (!Has(message, "the store at " + store + " that it hosted no longer answers")) {
          failure = "the message does not say that the store at " + store +
                    " hosted by rank 0 is gone: " + message;
        } else if (braidAllReduce(send.data(), recv.data(), send.size(), braidFloat32, braidSum,
                                  comm, nullptr) != rc ||
                   braidGetLastError(comm) != message) {
          failure = std::string("a later call says otherwise: ") + braidGetLastError(comm);
        }
        braidCommDestroy(comm);
        return failure;
      },
      60000);
  CHECK(results[0] == "killed by signal 9");
  for (int rank = 1; rank < kRanks; ++rank) {
    INFO("rank " << rank << ": " << results[rank]);
    CHECK(results[rank].empty());
  }
}
