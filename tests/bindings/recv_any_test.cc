// braidRecvAny (MPI_ANY_SOURCE): every sender's messages arrive, each sender's in its own order,
// whoever sends first; over shared memory and TCP, ranks as threads and as processes, small and
// large messages, with links that exist at init, that this rank must dial, and that the sender
// dials during the wait; messages whose senders destroyed their communicators and exited before
// the receives began (each still arrives; a sender gone with nothing left is no candidate, and
// with every candidate gone the receive names them). Errors: a size mismatch (braidInvalidUsage naming both sizes and the
// sender, the message kept for a receive of its size), inside a group, bad arguments, a
// communicator of one rank, every peer gone on to a collective, the deadline, and
// braidCommAbort. The values each rank checks are computed from (sender, message, element).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/braid.h"
#include "tests/harness/communicator.h"

namespace braid::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Element i of message `index` from `sender`.
int32_t Value(int sender, int index, size_t i) {
  return static_cast<int32_t>(sender * 1000003 + index * 7919 + static_cast<int64_t>(i) * 31);
}

std::vector<int32_t> Message(int sender, int index, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value(sender, index, i);
  return v;
}

// "" if `got` is message `index` of `sender`.
std::string Check(const std::vector<int32_t>& got, int sender, int index) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != Value(sender, index, i)) {
      return "element " + std::to_string(i) + " of message " + std::to_string(index) +
             " from rank " + std::to_string(sender) + " is " + std::to_string(got[i]) +
             ", expected " + std::to_string(Value(sender, index, i));
    }
  }
  return "";
}

// Whether process `pid` has exited (a zombie its parent has not reaped yet counts), or no longer
// exists.
bool Exited(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  // "pid (comm) S ...": the state follows the last ')'.
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z' ||
         line[paren + 2] == 'X';
}

// Memory the ranks of a job share even as forked processes (mapped before the fork).
template <typename T>
class Shared {
 public:
  Shared() {
    void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    value_ = new (p) T();
  }
  ~Shared() {
    value_->~T();
    munmap(value_, sizeof(T));
  }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  T& operator*() const { return *value_; }
  T* operator->() const { return value_; }

 private:
  T* value_;
};

CommJob Job(int size, const char* transports, int timeout_ms = kOperationTimeoutMs) {
  CommJob job;
  job.size = size;
  job.config.transports = transports;
  job.config.timeoutMs = timeout_ms;
  return job;
}

}  // namespace

TEST_CASE("braidRecvAny: every sender's messages arrive, each sender's in order, whoever is "
          "first", "[recvany]") {
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  const Ranks ranks = GENERATE(Ranks::kThreads, Ranks::kProcesses);
  // One ring line (shm) / staged read (tcp); by reference or in ring pieces / read direct.
  const size_t count = GENERATE(size_t{5}, size_t{300000});
  constexpr int kSize = 4;
  constexpr int kPerSender = 2;
  CommJob job = Job(kSize, transports);
  job.ranks = ranks;
  CAPTURE(Describe(job), count);
  // Rank 0's receipts, in arrival order (threads only; processes check inside the body).
  std::vector<int> arrivals;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int size) -> std::string {
    if (rank != 0) {
      // Different, overlapping timings per sender, so arrival order varies from run to run.
      for (int index = 0; index < kPerSender; ++index) {
        std::this_thread::sleep_for(std::chrono::milliseconds((size - rank) * 3 + index * rank * 2));
        std::vector<int32_t> out = Message(rank, index, count);
        BRAID_TRY(braidSend(out.data(), count, braidInt32, 0, comm, nullptr),
            "send " + std::to_string(index));
      }
    } else {
      std::map<int, int> seen;  // sender -> messages received from it so far
      for (int n = 0; n < (size - 1) * kPerSender; ++n) {
        std::vector<int32_t> in(count, -1);
        int peer = -7;
        BRAID_TRY(braidRecvAny(in.data(), count, braidInt32, &peer, comm, nullptr),
            "receive " + std::to_string(n));
        if (peer < 1 || peer >= size) return "receive " + std::to_string(n) + ": peer " + std::to_string(peer);
        const int index = seen[peer]++;
        if (index >= kPerSender) return "rank " + std::to_string(peer) + " was reported more than twice";
        // Each sender's messages in its own order: the k-th from it is its message k.
        std::string wrong = Check(in, peer, index);
        if (!wrong.empty()) return wrong;
        arrivals.push_back(peer);
      }
    }
    // The communicator is still in step: a collective after it (whose first messages may reach
    // rank 0 while it still receives, which must not confuse it).
    BRAID_TRY(braidBarrier(comm, nullptr), "barrier");
    int64_t one = 1, sum = 0;
    BRAID_TRY(braidAllReduce(&one, &sum, 1, braidInt64, braidSum, comm, nullptr), "allreduce");
    if (sum != size) return "allreduce after the receives gave " + std::to_string(sum);
    return "";
  });
  BRAID_CHECK_RANKS(results);
  if (ranks == Ranks::kThreads) {
    CHECK(arrivals.size() == (kSize - 1) * kPerSender);
    for (int sender = 1; sender < kSize; ++sender) {
      CAPTURE(sender);
      CHECK(std::count(arrivals.begin(), arrivals.end(), sender) == kPerSender);
    }
  }
}

TEST_CASE("braidRecvAny: links are made as senders show up, never waiting for a silent rank",
          "[recvany]") {
  // 4 ranks: init links ring neighbours only, so rank 2 has no link to rank 0 (which must dial
  // it) and rank 0 none to rank 2 (which it dials). Ranks 1 and 3 never send to 2.
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  CommJob job = Job(4, transports);
  CAPTURE(Describe(job));
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 2 waits first
      std::vector<int32_t> out = Message(0, 0, 9);
      BRAID_TRY(braidSend(out.data(), out.size(), braidInt32, 2, comm, nullptr), "send to 2");
      std::vector<int32_t> in(3);
      int peer = -1;
      BRAID_TRY(braidRecvAny(in.data(), in.size(), braidInt32, &peer, comm, nullptr), "receive at 0");
      if (peer != 2) return "rank 0 got a message from rank " + std::to_string(peer);
      std::string wrong = Check(in, 2, 1);
      if (!wrong.empty()) return wrong;
    } else if (rank == 2) {
      std::vector<int32_t> in(9);
      int peer = -1;
      BRAID_TRY(braidRecvAny(in.data(), in.size(), braidInt32, &peer, comm, nullptr), "receive at 2");
      if (peer != 0) return "rank 2 got a message from rank " + std::to_string(peer);
      std::string wrong = Check(in, 0, 0);
      if (!wrong.empty()) return wrong;
      std::vector<int32_t> out = Message(2, 1, 3);
      BRAID_TRY(braidSend(out.data(), out.size(), braidInt32, 0, comm, nullptr), "send to 0");
    }
    BRAID_TRY(braidBarrier(comm, nullptr), "barrier");
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("braidRecvAny: messages sent before their senders exited all arrive, then the lost "
          "senders are named", "[recvany][lost]") {
  // The senders send (twice each, or once and three times), destroy their communicators and
  // exit; only then does rank 0 start receiving. As braidRecv from each would, braidRecvAny hands
  // over every message they sent (each sender's in its order) before it reports their loss: a
  // sender gone with nothing left is no candidate while another still has messages (with one and
  // three, the round-robin polls rank 1 again after its only message was taken).
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  const bool uneven = GENERATE(false, true);
  const size_t count = 5;  // 20 bytes
  constexpr int kSize = 3;
  const int sends[kSize] = {0, uneven ? 1 : 2, uneven ? 3 : 2};
  CommJob job = Job(kSize, transports, 20000);
  job.ranks = Ranks::kProcesses;
  CAPTURE(Describe(job), uneven);
  struct Senders {
    std::atomic<pid_t> pid[kSize];
  };
  Shared<Senders> senders;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int size) -> std::string {
    if (rank != 0) {
      for (int index = 0; index < sends[rank]; ++index) {
        std::vector<int32_t> out = Message(rank, index, count);
        BRAID_TRY(braidSend(out.data(), count, braidInt32, 0, comm, nullptr),
            "send " + std::to_string(index));
      }
      senders->pid[rank] = getpid();  // the harness destroys the communicator and exits next
      return "";
    }
    // Wait until every sender's process has exited, then a little longer so that this rank's
    // transports have seen their links close.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    for (int p = 1; p < size; ++p) {
      while (senders->pid[p].load() == 0 || !Exited(senders->pid[p].load())) {
        if (std::chrono::steady_clock::now() > give_up) {
          return "rank " + std::to_string(p) + " did not exit";
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::map<int, int> seen;  // sender -> messages received from it so far
    for (int n = 0; n < sends[1] + sends[2]; ++n) {
      std::vector<int32_t> in(count, -1);
      int peer = -7;
      BRAID_TRY(braidRecvAny(in.data(), count, braidInt32, &peer, comm, nullptr),
          "receive " + std::to_string(n));
      if (peer < 1 || peer >= size) {
        return "receive " + std::to_string(n) + ": peer " + std::to_string(peer);
      }
      const int index = seen[peer]++;
      if (index >= sends[peer]) {
        return "rank " + std::to_string(peer) + " was reported more than " +
               std::to_string(sends[peer]) + " time(s)";
      }
      std::string wrong = Check(in, peer, index);
      if (!wrong.empty()) return wrong;
    }
    // Nothing is left and every sender is gone: the next receive fails at once naming them.
    std::vector<int32_t> in(count, -1);
    int peer = -7;
    const auto start = std::chrono::steady_clock::now();
    const braidResult_t rc = braidRecvAny(in.data(), count, braidInt32, &peer, comm, nullptr);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string message = braidGetLastError(comm);
    if (rc != braidRemoteError) {
      return "a receive after the last message gave " + std::string(braidGetErrorString(rc)) + ": " + message;
    }
    if (peer != -1) return "a receive after the last message reported rank " + std::to_string(peer);
    if (!Contains(message, "rank 1") || !Contains(message, "rank 2") ||
        !Contains(message, "lost")) {
      return "a receive after the last message names not both lost ranks: " + message;
    }
    if (seconds > 10) {
      return "a receive after the last message took " + std::to_string(seconds) + " s";
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
}

TEST_CASE("braidRecvAny: a message of another size is braidInvalidUsage naming both sizes and "
          "the sender, and stays for a receive of its size", "[recvany][error]") {
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  const size_t sent = GENERATE(size_t{4}, size_t{100000});
  const bool receive_larger = GENERATE(true, false);
  CommJob job = Job(3, transports);
  CAPTURE(Describe(job), sent, receive_larger);
  const size_t asked = receive_larger ? sent * 2 : sent / 2;
  braidResult_t mismatch_rc = braidSuccess;
  std::string mismatch_message;
  int mismatch_peer = 0;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 1) {
      std::vector<int32_t> out = Message(1, 0, sent);
      BRAID_TRY(braidSend(out.data(), out.size(), braidInt32, 0, comm, nullptr), "send");
    } else if (rank == 0) {
      std::vector<int32_t> in(std::max(sent, asked));
      int peer = 5;
      mismatch_rc = braidRecvAny(in.data(), asked, braidInt32, &peer, comm, nullptr);
      mismatch_message = braidGetLastError(comm);
      mismatch_peer = peer;
      // Nothing was taken: a receive of the right size gets the message whole.
      in.assign(sent, -1);
      BRAID_TRY(braidRecvAny(in.data(), sent, braidInt32, &peer, comm, nullptr), "receive again");
      if (peer != 1) return "the second receive reports rank " + std::to_string(peer);
      std::string wrong = Check(in, 1, 0);
      if (!wrong.empty()) return wrong;
    }
    BRAID_TRY(braidBarrier(comm, nullptr), "barrier");  // still usable
    return "";
  });
  BRAID_CHECK_RANKS(results);
  INFO(mismatch_message);
  CHECK(mismatch_rc == braidInvalidUsage);
  CHECK(mismatch_peer == -1);
  CHECK(Contains(mismatch_message, "rank 1"));
  CHECK(Contains(mismatch_message, std::to_string(sent * 4) + " bytes"));
  CHECK(Contains(mismatch_message, std::to_string(asked * 4)));
}

TEST_CASE("braidRecvAny: argument and usage errors", "[recvany][error]") {
  CommJob job = Job(2, nullptr);
  std::vector<braidResult_t> rcs;
  std::vector<std::string> messages;
  std::mutex mutex;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank != 0) return "";
    int32_t x = 0;
    int peer = 9;
    int fake_stream = 0;
    auto record = [&](braidResult_t rc) {
      std::lock_guard<std::mutex> lock(mutex);
      rcs.push_back(rc);
      messages.push_back(braidGetLastError(comm));
    };
    record(braidRecvAny(&x, 1, braidInt32, nullptr, comm, nullptr));               // 0
    record(braidRecvAny(nullptr, 1, braidInt32, &peer, comm, nullptr));            // 1
    record(braidRecvAny(&x, 1, static_cast<braidDataType_t>(42), &peer, comm, nullptr));  // 2
    record(braidRecvAny(&x, 1, braidInt32, &peer, comm, &fake_stream));            // 3
    if (braidGroupStart() != braidSuccess) return "group start";
    record(braidRecvAny(&x, 1, braidInt32, &peer, comm, nullptr));                 // 4
    if (braidGroupEnd() != braidSuccess) return "group end";
    record(braidRecvAny(&x, 1, braidInt32, &peer, nullptr, nullptr));              // 5
    if (peer != -1) return "peer is " + std::to_string(peer) + " after a failure";
    return "";
  });
  BRAID_CHECK_RANKS(results);
  REQUIRE(rcs.size() == 6);
  CHECK(rcs[0] == braidInvalidArgument);
  CHECK(Contains(messages[0], "peer"));
  CHECK(rcs[1] == braidInvalidArgument);
  CHECK(Contains(messages[1], "recvbuff"));
  CHECK(rcs[2] == braidInvalidArgument);
  CHECK(Contains(messages[2], "datatype"));
  CHECK(rcs[3] == braidInvalidUsage);
  CHECK(Contains(messages[3], "stream"));
  CHECK(rcs[4] == braidInvalidUsage);
  CHECK(Contains(messages[4], "braidGroupStart"));
  CHECK(rcs[5] != braidSuccess);

  // A communicator of one rank has nobody to receive from.
  braidComm_t single = OneRankComm();
  int32_t x = 0;
  int peer = 3;
  CHECK(braidRecvAny(&x, 1, braidInt32, &peer, single, nullptr) == braidInvalidUsage);
  CHECK(peer == -1);
  CHECK(Contains(braidGetLastError(single), "no other rank"));
  CHECK(braidCommDestroy(single) == braidSuccess);
}

TEST_CASE("braidRecvAny: when every other rank has gone on to a collective it fails at once",
          "[recvany][error]") {
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  CommJob job = Job(2, transports, 20000);
  CAPTURE(Describe(job));
  braidResult_t rc = braidSuccess;
  std::string message;
  double seconds = 0;
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 1's barrier is in
      int32_t x = 0;
      int peer = 0;
      const auto start = std::chrono::steady_clock::now();
      rc = braidRecvAny(&x, 1, braidInt32, &peer, comm, nullptr);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      message = braidGetLastError(comm);
    }
    BRAID_TRY(braidBarrier(comm, nullptr), "barrier");
    return "";
  });
  BRAID_CHECK_RANKS(results);
  INFO(message);
  CHECK(rc == braidInvalidUsage);
  CHECK(Contains(message, "collective"));
  CHECK(seconds < 10);
}

TEST_CASE("braidRecvAny: nothing sent times out naming the ranks; braidCommAbort wakes it",
          "[recvany][error]") {
  const char* transports = GENERATE(as<const char*>(), nullptr, "tcp");
  const bool abort = GENERATE(false, true);
  CommJob job = Job(3, transports, abort ? 60000 : 1000);
  CAPTURE(Describe(job), abort);
  braidResult_t rc = braidSuccess;
  std::string message;
  double seconds = 0;
  std::atomic<bool> done{false};
  std::atomic<braidComm_t> receiver{nullptr};
  auto results = RunComms(job, [&](braidComm_t comm, int rank, int) -> std::string {
    if (rank == 0) {
      receiver = comm;
      int32_t x = 0;
      int peer = 0;
      const auto start = std::chrono::steady_clock::now();
      rc = braidRecvAny(&x, 1, braidInt32, &peer, comm, nullptr);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      message = braidGetLastError(comm);
      done = true;
    } else {
      if (abort && rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        while (receiver.load() == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        braidCommAbort(receiver.load());
      }
      // Stay until rank 0 is done, so that it sees the deadline or the abort, not a lost peer.
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return "";
  });
  BRAID_CHECK_RANKS(results);
  INFO(message);
  if (abort) {
    CHECK(rc == braidAborted);
    CHECK(seconds < 5);
  } else {
    CHECK(rc == braidTimeout);
    CHECK(Contains(message, "rank(s) 1, 2"));
    CHECK(seconds >= 0.9);
    CHECK(seconds < 10);
  }
}

}  // namespace braid::testing
