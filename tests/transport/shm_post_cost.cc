// Cost of one small shm message when its receive is posted before the send, the path of an
// exchange whose partner's data has not landed yet (the receive's request cannot finish in
// PostRecv). Single-threaded over a thread-rank pair, so instruction counts are exact:
//   valgrind --tool=callgrind bazel-bin/tests/transport/shm_post_cost 100000
// and compare with a run of fewer iterations; also prints nanoseconds per message natively.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tests/transport/shm_test_util.h"

using namespace braid;
using namespace braid::transport;
using namespace braid::transport::shm::testing;

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 1000000;
  Mesh mesh = MakeMesh(2, 77);
  if (!mesh.error.empty()) {
    std::fprintf(stderr, "%s\n", mesh.error.c_str());
    return 1;
  }
  Connection& a = *mesh.conns[0][1];
  Connection& b = *mesh.conns[1][0];
  float out[2] = {1, 2}, in[2];
  const Deadline deadline = Deadline::AfterMs(kTestTimeoutMs);
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) {
    RequestPtr recv = a.PostRecv(in, sizeof(in), i);
    RequestPtr send = b.PostSend(out, sizeof(out), i);
    if (!recv->Wait(deadline).ok() || !send->Wait(deadline).ok()) {
      std::fprintf(stderr, "message %ld failed\n", i);
      return 1;
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(
                        std::chrono::steady_clock::now() - start).count();
  std::printf("%.1f ns per message (receive posted first), %ld messages\n", ns / iterations,
              iterations);
  return 0;
}
