// Two forked ranks for bench/calibrate (see forked_pair.h).
#include "bench/forked_pair.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace braid::bench {

std::optional<std::string> RunForkedPair(
    const std::function<std::optional<std::string>(int rank)>& body) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("calibrate: pipe");
    return std::nullopt;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t children[2] = {-1, -1};
  for (int rank = 0; rank < 2; ++rank) {
    children[rank] = fork();
    if (children[rank] < 0) {
      std::perror("calibrate: fork");
    } else if (children[rank] == 0) {
      close(fds[0]);
      const std::optional<std::string> result = body(rank);
      if (result && rank == 0) {
        ssize_t written = write(fds[1], result->data(), result->size());
        (void)written;
      }
      _exit(result ? 0 : 1);
    }
  }
  close(fds[1]);
  std::string bytes;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) bytes.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  bool ok = true;
  for (pid_t child : children) {
    if (child < 0) {
      ok = false;
      continue;
    }
    int status = 0;
    waitpid(child, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) return std::nullopt;
  return bytes;
}

}  // namespace braid::bench
