// braidrun end to end: environment, output prefixes, exit codes, stopping the job when a rank
// fails, signal forwarding, a two-"node" job on loopback, and usage errors.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/cpu_binding.h"
#include "tests/harness/free_port.h"

extern char** environ;

namespace {

const char kBraidrun[] = "rendezvous/braidrun";
const char kChild[] = "tests/store/braidrun_child";

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

struct Process {
  pid_t pid = -1;
  std::string out_path;
  std::string err_path;
};

struct Outcome {
  int code = -1;  // exit code, 128+signal, or -1 if it had to be killed at the timeout
  std::string out;
  std::string err;
  int64_t ms = 0;
};

// Starts braidrun with `args`; stdout/stderr go to files. BRAID_SECRET is removed from the
// environment unless given in `env`.
Process Start(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  static int counter = 0;
  Process p;
  std::string base =
      TempDir() + "/braidrun_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  p.out_path = base + ".out";
  p.err_path = base + ".err";
  std::vector<std::string> argv_s = {kBraidrun};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("BRAID_SECRET=", 0) != 0) env_s.push_back(*e);
  }
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(&s[0]);
  argv.push_back(nullptr);
  for (auto& s : env_s) envp.push_back(&s[0]);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  if (posix_spawn(&p.pid, kBraidrun, &actions, nullptr, argv.data(), envp.data()) != 0) p.pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return p;
}

Outcome Wait(const Process& p, int timeout_ms = 20000) {
  Outcome o;
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    pid_t done = waitpid(p.pid, &status, WNOHANG);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    if (done == p.pid) {
      o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (done < 0 || ms > timeout_ms) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  o.ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
             .count();
  o.out = ReadFile(p.out_path);
  o.err = ReadFile(p.err_path);
  return o;
}

Outcome Run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  Process p = Start(args, env);
  if (p.pid < 0) return Outcome{};
  return Wait(p);
}

// Polls until `path` contains `count` occurrences of `text`.
bool WaitForText(const std::string& path, const std::string& text, int count, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    std::string content = ReadFile(path);
    int found = 0;
    for (size_t pos = 0; (pos = content.find(text, pos)) != std::string::npos; pos += text.size()) {
      ++found;
    }
    if (found >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST_CASE("braidrun gives each rank its environment and prefixes its output", "[braidrun]") {
  Outcome o = Run({"-n", "3", "--", "sh", "-c",
                   "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK "
                   "$MASTER_ADDR $BRAID_STORE_HOSTED; echo port=$MASTER_PORT secret=$BRAID_SECRET; "
                   "echo oops >&2; printf tail"});
  INFO(o.err);
  REQUIRE(o.code == 0);
  std::vector<std::string> lines = Lines(o.out);
  std::set<std::string> got(lines.begin(), lines.end());
  for (int r = 0; r < 3; ++r) {
    std::string p = "[" + std::to_string(r) + "] ";
    CHECK(got.count(p + std::to_string(r) + " 3 " + std::to_string(r) + " 3 0 127.0.0.1 1") == 1);
    CHECK(got.count(p + "tail") == 1);
    CHECK_THAT(o.err, Catch::Contains(p + "oops\n"));
  }
  // Every rank saw the same non-zero port and the same non-empty secret.
  std::set<std::string> port_lines;
  for (const std::string& line : lines) {
    if (line.find("port=") != std::string::npos) port_lines.insert(line.substr(4));
  }
  REQUIRE(port_lines.size() == 1);
  CHECK(port_lines.begin()->find("port=0 ") == std::string::npos);
  CHECK(port_lines.begin()->find("secret= ") == std::string::npos);
  CHECK(port_lines.begin()->size() > std::string("port=1 secret=").size() + 16);
}

TEST_CASE("ranks reach the hosted store with the secret", "[braidrun]") {
  Outcome o = Run({"-n", "4", kChild});
  INFO(o.out << o.err);
  REQUIRE(o.code == 0);
  for (int r = 0; r < 4; ++r) {
    CHECK_THAT(o.out, Catch::Contains("[" + std::to_string(r) + "] rank " + std::to_string(r) +
                                      " of 4 saw 4 joined"));
  }
}

TEST_CASE("--no-prefix passes output through", "[braidrun]") {
  Outcome o = Run({"--no-prefix", "-n", "2", "sh", "-c", "echo r$RANK"});
  REQUIRE(o.code == 0);
  std::vector<std::string> lines = Lines(o.out);
  std::sort(lines.begin(), lines.end());
  CHECK(lines == std::vector<std::string>{"r0", "r1"});
}

// "Cpus_allowed_list:\t0-1" of /proc/self/status: the CPUs this process may run on.
std::string OwnCpuList() {
  for (const std::string& line : Lines(ReadFile("/proc/self/status"))) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find('\t') + 1);
  }
  return "";
}

// Each rank prints "cpus=<its Cpus_allowed_list>"; returns them by rank.
std::vector<std::string> RankCpuLists(const std::vector<std::string>& options, int n) {
  std::vector<std::string> args = options;
  for (const char* a : {"-n", "", "--", "sh", "-c",
                        "echo cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "
                        "/proc/self/status)"}) {
    args.push_back(a);
  }
  args[options.size() + 1] = std::to_string(n);
  Outcome o = Run(args);
  INFO(o.out << o.err);
  REQUIRE(o.code == 0);
  std::vector<std::string> lists(static_cast<size_t>(n));
  for (const std::string& line : Lines(o.out)) {
    int rank = -1;
    char list[256] = {0};
    if (std::sscanf(line.c_str(), "[%d] cpus=%255s", &rank, list) == 2 && rank >= 0 && rank < n) {
      lists[static_cast<size_t>(rank)] = list;
    }
  }
  return lists;
}

TEST_CASE("--bind-to core puts rank r on the r-th allowed CPU, auto on the r-th share (none "
          "past one rank per CPU), none leaves them be",
          "[braidrun]") {
  const std::vector<int> cpus = braid::rendezvous::AllowedCpus();  // this process's mask
  REQUIRE(!cpus.empty());
  const std::string all = OwnCpuList();
  const int n = static_cast<int>(cpus.size()) + 1;  // one rank more than CPUs: wraps around
  std::vector<std::string> core = RankCpuLists({"--bind-to", "core"}, n);
  for (int r = 0; r < n; ++r) {
    CHECK(core[static_cast<size_t>(r)] == std::to_string(cpus[static_cast<size_t>(r) % cpus.size()]));
  }
  // auto leaves the ranks of an oversubscribed node unbound...
  for (const std::string& list : RankCpuLists({}, n)) CHECK(list == all);
  for (const std::string& list : RankCpuLists({"--bind-to=auto"}, n)) CHECK(list == all);
  // ...gives ranks that have a CPU each one CPU of their own (as core does)...
  const int fit = static_cast<int>(cpus.size());
  std::vector<std::string> own = RankCpuLists({}, fit);
  for (int r = 0; r < fit; ++r) {
    CHECK(own[static_cast<size_t>(r)] == std::to_string(cpus[static_cast<size_t>(r)]));
  }
  // ...and a lone rank every CPU braidrun may use; none leaves every rank there.
  for (const std::string& list : RankCpuLists({}, 1)) CHECK(list == all);
  for (const std::string& list : RankCpuLists({"--bind-to", "none"}, n)) CHECK(list == all);
}

TEST_CASE("the first failing rank's code is returned", "[braidrun]") {
  Outcome o = Run({"-n", "3", "sh", "-c", "exit $(( RANK == 1 ? 3 : 0 ))"});
  CHECK(o.code == 3);
  CHECK_THAT(o.err, Catch::Contains("rank 1"));
  o = Run({"-n", "2", "sh", "-c", "if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 30"});
  CHECK(o.code == 128 + 9);
  CHECK(o.ms < 5000);
  o = Run({"-n", "1", "./no-such-program-here"});
  CHECK(o.code == 127);
  CHECK_THAT(o.err, Catch::Contains("no-such-program-here"));
}

TEST_CASE("a failing rank stops ranks that would run forever", "[braidrun]") {
  Outcome o =
      Run({"-n", "3", "sh", "-c", "if [ $RANK = 2 ]; then sleep 0.3; exit 5; fi; sleep 1000"});
  CHECK(o.code == 5);
  CHECK(o.ms < 3000);  // SIGTERM is enough for sleep

  // A rank that ignores SIGTERM is killed after the grace period.
  o = Run({"-n", "2", "sh", "-c",
           "if [ $RANK = 0 ]; then trap '' TERM; sleep 1000 & wait; fi; sleep 0.3; exit 6"});
  CHECK(o.code == 6);
  CHECK(o.ms >= 2500);
  CHECK(o.ms < 8000);
  CHECK_THAT(o.err, Catch::Contains("SIGKILL"));
}

TEST_CASE("SIGTERM to braidrun is forwarded to the ranks", "[braidrun]") {
  Process p = Start(
      {"-n", "2", "sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo ready; sleep 1000 & wait"});
  REQUIRE(p.pid > 0);
  REQUIRE(WaitForText(p.out_path, "ready", 2, 10000));
  kill(p.pid, SIGTERM);
  Outcome o = Wait(p);
  CHECK(o.code == 7);
  CHECK_THAT(o.out, Catch::Contains("[0] got TERM"));
  CHECK_THAT(o.out, Catch::Contains("[1] got TERM"));
  CHECK(o.ms < 5000);
}

TEST_CASE("two nodes on loopback form one job", "[braidrun]") {
  int port = braid::testing::FreePort();
  std::vector<std::string> env = {"BRAID_SECRET=shared-test-secret"};
  std::string p = std::to_string(port);
  Process node0 =
      Start({"--nnodes", "2", "--node-rank", "0", "--master-port", p, "-n", "2", kChild}, env);
  Process node1 = Start({"--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1",
                         "--master-port=" + p, "--nproc_per_node=2", kChild},
                        env);
  Outcome o1 = Wait(node1);
  Outcome o0 = Wait(node0);
  INFO(o0.err << o1.err);
  CHECK(o0.code == 0);
  CHECK(o1.code == 0);
  CHECK_THAT(o0.out, Catch::Contains("[0] rank 0 of 4 saw 4 joined"));
  CHECK_THAT(o0.out, Catch::Contains("[1] rank 1 of 4 saw 4 joined"));
  CHECK_THAT(o1.out, Catch::Contains("[2] rank 2 of 4 saw 4 joined"));
  CHECK_THAT(o1.out, Catch::Contains("[3] rank 3 of 4 saw 4 joined"));
}

TEST_CASE("bad usage prints the usage and exits 2", "[braidrun]") {
  Outcome help = Run({"--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("Usage: braidrun"));
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"-n"},
      {"-n", "0", "true"},
      {"-n", "abc", "true"},
      {"-n", "2x", "true"},
      {"--bogus", "true"},
      {"--no-prefix=1", "true"},
      {"--nnodes", "2", "--node-rank", "2", "--master-port", "1234", "true"},
      {"--nnodes", "2", "true"},
      {"--master-port", "70000", "true"},
      {"--bind-to", "socket", "true"},
      {"--bind-to"},
      {"-n", "2", "--"},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    INFO("braidrun " << joined);
    Outcome o = Run(args);
    CHECK(o.code == 2);
    CHECK_THAT(o.err, Catch::Contains("Usage: braidrun"));
  }
  Outcome no_secret = Run({"--nnodes", "2", "--node-rank", "1", "--master-port", "1234", "true"});
  CHECK(no_secret.code == 2);
  CHECK_THAT(no_secret.err, Catch::Contains("BRAID_SECRET"));
}

}  // namespace
