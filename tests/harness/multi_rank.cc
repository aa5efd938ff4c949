#include "tests/harness/multi_rank.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace braid::testing {
namespace {

std::string RunGuarded(const RankBody& body, int rank, int size) {
  try {
    return body(rank, size);
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  } catch (...) {
    return "unknown exception";
  }
}

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::vector<std::string> RunThreads(int size, const RankBody& body, int timeout_ms,
                                    const WakeRanks& wake, int wake_grace_ms) {
  // Shared with the rank threads; results move into it under the mutex as ranks finish.
  struct Board {
    std::mutex mutex;
    std::condition_variable finished;
    std::vector<std::string> results;
    std::vector<bool> done;
    int running = 0;
  };
  auto board = std::make_shared<Board>();
  board->results.resize(size);
  board->done.assign(size, false);
  board->running = size;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([board, &body, rank, size] {
      std::string result = RunGuarded(body, rank, size);
      std::lock_guard<std::mutex> lock(board->mutex);
      board->results[rank] = std::move(result);
      board->done[rank] = true;
      --board->running;
      board->finished.notify_all();
    });
  }

  auto stuck_ranks = [&] {
    std::vector<int> stuck;
    for (int rank = 0; rank < size; ++rank) {
      if (!board->done[rank]) stuck.push_back(rank);
    }
    return stuck;
  };
  std::vector<int> late;
  {
    std::unique_lock<std::mutex> lock(board->mutex);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    if (!board->finished.wait_until(lock, deadline, [&] { return board->running == 0; })) {
      late = stuck_ranks();
    }
  }
  if (!late.empty()) {
    if (wake) wake(late);
    std::unique_lock<std::mutex> lock(board->mutex);
    const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(wake_grace_ms);
    if (!board->finished.wait_until(lock, grace, [&] { return board->running == 0; })) {
      std::string names;
      for (int rank : stuck_ranks()) names += (names.empty() ? "" : ", ") + std::to_string(rank);
      std::fprintf(stderr,
                   "FAILED: rank(s) %s of %d did not finish within %d ms%s; exiting, since a "
                   "thread cannot be stopped\n",
                   names.c_str(), size, timeout_ms,
                   wake ? " and did not return after being woken" : "");
      std::fflush(stderr);
      _exit(1);
    }
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> results = std::move(board->results);
  for (int rank : late) {
    results[rank] = "did not finish within " + std::to_string(timeout_ms) + " ms" +
                    (wake ? " (woken; then returned: " +
                                (results[rank].empty() ? std::string("success") : results[rank]) +
                                ")"
                          : std::string());
  }
  return results;
}

std::vector<std::string> RunProcesses(int size, const RankBody& body, int timeout_ms) {
  std::vector<std::string> results(size);
  std::vector<pid_t> pids(size, -1);
  std::vector<int> fds(size, -1);
  for (int rank = 0; rank < size; ++rank) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) {
      results[rank] = "pipe() failed";
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(pipe_fds[0]);
      // "ok" marks a report, so a child that dies silently is told apart from a pass.
      std::string result = RunGuarded(body, rank, size);
      WriteAll(pipe_fds[1], result.empty() ? std::string("ok") : "fail:" + result);
      close(pipe_fds[1]);
      _exit(0);  // skip Catch2's and the parent's static destructors
    }
    close(pipe_fds[1]);
    if (pid < 0) {
      close(pipe_fds[0]);
      results[rank] = "fork() failed";
      continue;
    }
    pids[rank] = pid;
    fds[rank] = pipe_fds[0];
  }

  std::vector<std::string> reports(size);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int open_fds = 0;
  for (int fd : fds) open_fds += fd >= 0;
  while (open_fds > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> polls;
    std::vector<int> ranks;
    for (int rank = 0; rank < size; ++rank) {
      if (fds[rank] >= 0) {
        polls.push_back({fds[rank], POLLIN, 0});
        ranks.push_back(rank);
      }
    }
    if (poll(polls.data(), polls.size(), 100) <= 0) continue;
    for (size_t i = 0; i < polls.size(); ++i) {
      if (polls[i].revents == 0) continue;
      char buffer[4096];
      ssize_t n = read(polls[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        reports[ranks[i]].append(buffer, static_cast<size_t>(n));
      } else {
        close(polls[i].fd);
        fds[ranks[i]] = -1;
        --open_fds;
      }
    }
  }
  for (int rank = 0; rank < size; ++rank) {
    if (pids[rank] < 0) continue;
    if (fds[rank] >= 0) {  // still running at the deadline
      kill(pids[rank], SIGKILL);
      close(fds[rank]);
      results[rank] = "did not finish within " + std::to_string(timeout_ms) + " ms (killed)";
    }
    int wstatus = 0;
    waitpid(pids[rank], &wstatus, 0);
    if (!results[rank].empty()) continue;
    if (reports[rank] == "ok") continue;
    if (reports[rank].rfind("fail:", 0) == 0) {
      results[rank] = reports[rank].substr(5);
    } else if (WIFSIGNALED(wstatus)) {
      results[rank] = "killed by signal " + std::to_string(WTERMSIG(wstatus));
    } else {
      results[rank] = "exited without reporting (status " + std::to_string(wstatus) + ")";
    }
  }
  return results;
}

std::string Failures(const std::vector<std::string>& results) {
  std::string out;
  for (size_t rank = 0; rank < results.size(); ++rank) {
    if (!results[rank].empty()) out += "rank " + std::to_string(rank) + ": " + results[rank] + "\n";
  }
  return out;
}

}  // namespace braid::testing
