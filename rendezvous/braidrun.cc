// braidrun: starts N local ranks of a program, like `torchrun --standalone`.
//
//   braidrun -n N [--] program args...
//   braidrun -n N --nnodes M --node-rank K --master-addr A --master-port P [--] program args...
//
// Node 0 hosts the TcpStoreServer the ranks rendezvous through (so rank 0 need not start one:
// BRAID_STORE_HOSTED=1) and protects it with a secret (BRAID_SECRET). Each child's stdout and
// stderr lines are prefixed with its rank. The first rank to fail (non-zero exit or a signal)
// stops the others: SIGTERM to each rank's process group, SIGKILL after a grace period; braidrun
// returns that first failure's code (128+signal for a signal). SIGINT/SIGTERM sent to braidrun
// are forwarded to the ranks. In a multi-node job every braidrun, once its ranks are done, waits
// at an exit barrier in the store (keys "braidrun/exit/*") so node 0's store outlives them all.
//
// With more local ranks than CPUs, rank r is bound to the r-th CPU braidrun may use
// (--bind-to, rendezvous/cpu_binding.h says why).
//
// Why process groups: a rank is often a shell or a Python launcher with children of its own;
// signalling the group reaches them all. Why posix_spawn: braidrun has a store server thread,
// and after fork() a multithreaded process may only call async-signal-safe functions.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/hmac_sha256.h"
#include "core/base/status.h"
#include "rendezvous/cpu_binding.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"

extern char** environ;

namespace braid::rendezvous {
namespace {

constexpr int kUsageExit = 2;
constexpr int kGraceMs = 3000;              // SIGTERM → SIGKILL
constexpr int kDrainMs = 2000;              // output still arriving after the last rank exited
constexpr int kExitBarrierMs = 300 * 1000;  // torchrun's default exit barrier timeout

const char kUsage[] =
    "Usage: braidrun [options] [--] program [args...]\n"
    "\n"
    "Starts the ranks of a braid job on this node, like `torchrun --standalone`.\n"
    "\n"
    "Options:\n"
    "  -n, --nproc-per-node N   ranks on this node (default 1)\n"
    "  --nnodes M               nodes in the job (default 1)\n"
    "  --node-rank K            this node's index in [0, M) (default 0)\n"
    "  --master-addr A          address of node 0, where the store runs (default 127.0.0.1)\n"
    "  --master-port P          store port (default: any free port; required if M > 1)\n"
    "  --no-prefix              do not prefix output lines with \"[rank] \"\n"
    "  --bind-to auto|none|core core: bind local rank r to the r-th CPU braidrun may use\n"
    "                           (wrapping); auto (default): to the r-th block of CPUs/ranks of\n"
    "                           them; unbound once the ranks outnumber the CPUs\n"
    "  -h, --help               this text\n"
    "\n"
    "Each rank gets MASTER_ADDR, MASTER_PORT, RANK (= K*N + local rank), WORLD_SIZE (= M*N),\n"
    "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (= K), BRAID_SECRET and BRAID_STORE_HOSTED=1.\n"
    "Node 0 hosts the store. With M > 1 every node needs the same BRAID_SECRET in its\n"
    "environment; with M = 1 braidrun generates one unless BRAID_SECRET is set. With M > 1,\n"
    "each braidrun waits (up to 300 s) after its ranks exit until every node's ranks are done,\n"
    "so that node 0's store outlives them all.\n"
    "\n"
    "Exit status: 0 if every rank succeeded; otherwise the first failing rank's exit code\n"
    "(128+signal if it was killed by a signal); 2 for bad usage.\n";

struct Options {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;  // -1: not given
  bool prefix = true;
  BindPolicy bind = BindPolicy::kAuto;
  bool help = false;
  std::vector<std::string> command;
};

Result<int> ParseInt(const std::string& flag, const std::string& text, int lo, int hi) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0' || value < lo || value > hi) {
    return Status::InvalidArgument(flag + " expects an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], got '" + text + "'");
  }
  return static_cast<int>(value);
}

Result<Options> ParseArgs(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the program
    std::string name = arg;
    std::optional<std::string> inline_value;
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    for (char& c : name) {
      if (c == '_') c = '-';  // accept torchrun's --nproc_per_node spelling too
    }
    auto value = [&]() -> Result<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) return Status::InvalidArgument(name + " needs a value");
      return std::string(argv[++i]);
    };
    auto no_value = [&]() -> Status {
      if (inline_value) return Status::InvalidArgument(name + " takes no value");
      return Status::Ok();
    };
    if (name == "-h" || name == "--help") {
      BRAID_RETURN_IF_ERROR(no_value());
      o.help = true;
      return o;
    } else if (name == "--no-prefix") {
      BRAID_RETURN_IF_ERROR(no_value());
      o.prefix = false;
    } else if (name == "--bind-to") {
      BRAID_ASSIGN_OR_RETURN(std::string v, value());
      BRAID_ASSIGN_OR_RETURN(o.bind, ParseBindPolicy(v));
    } else if (name == "-n" || name == "--nproc-per-node") {
      BRAID_ASSIGN_OR_RETURN(std::string v, value());
      BRAID_ASSIGN_OR_RETURN(o.nproc, ParseInt(name, v, 1, 1024));
    } else if (name == "--nnodes") {
      BRAID_ASSIGN_OR_RETURN(std::string v, value());
      BRAID_ASSIGN_OR_RETURN(o.nnodes, ParseInt(name, v, 1, 1 << 20));
    } else if (name == "--node-rank") {
      BRAID_ASSIGN_OR_RETURN(std::string v, value());
      BRAID_ASSIGN_OR_RETURN(o.node_rank, ParseInt(name, v, 0, (1 << 20) - 1));
    } else if (name == "--master-addr") {
      BRAID_ASSIGN_OR_RETURN(o.master_addr, value());
      if (o.master_addr.empty()) return Status::InvalidArgument("--master-addr is empty");
    } else if (name == "--master-port") {
      BRAID_ASSIGN_OR_RETURN(std::string v, value());
      BRAID_ASSIGN_OR_RETURN(o.master_port, ParseInt(name, v, 0, 65535));
    } else {
      return Status::InvalidArgument("unknown option '" + arg + "'");
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) return Status::InvalidArgument("no program given");
  if (o.node_rank >= o.nnodes) {
    return Status::InvalidArgument("--node-rank " + std::to_string(o.node_rank) +
                                   " is not below --nnodes " + std::to_string(o.nnodes));
  }
  if (static_cast<int64_t>(o.nnodes) * o.nproc > INT32_MAX) {
    return Status::InvalidArgument("--nnodes times -n is too large");
  }
  if (o.nnodes > 1 && o.master_port <= 0) {
    return Status::InvalidArgument("--master-port is required (and not 0) when --nnodes > 1");
  }
  return o;
}

// 256 bits from the kernel (getrandom), as 64 hex characters; "" if there is no random source.
std::string RandomSecret() {
  uint8_t bytes[32];
  if (!braid::crypto::RandomBytes(bytes, sizeof(bytes)).ok()) return "";
  return braid::crypto::ToHex(bytes, sizeof(bytes));
}

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // stdout closed (EPIPE) or full disk: output is lost, the job goes on
    }
  }
}

void Say(const std::string& text) { WriteAll(2, "braidrun: " + text + "\n"); }

// One child pipe (stdout or stderr of one rank), re-emitted line by line with a prefix.
struct OutputStream {
  int fd = -1;
  int target = 1;
  std::string prefix;
  std::string pending;

  // Returns false at EOF/error (the stream is finished and closed).
  bool Pump() {
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      if (!pending.empty()) WriteAll(target, prefix + pending + "\n");
      pending.clear();
      ::close(fd);
      fd = -1;
      return false;
    }
    pending.append(buf, static_cast<size_t>(n));
    std::string out;
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      out += prefix;
      out.append(pending, start, nl + 1 - start);
    }
    pending.erase(0, start);
    if (pending.size() > 65536) {  // a very long line: emit what we have
      out += prefix + pending + "\n";
      pending.clear();
    }
    if (!out.empty()) WriteAll(target, out);
    return true;
  }
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
};

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with code " + std::to_string(ExitCodeOf(status));
}

std::vector<std::string> ChildEnvironment(const Options& o, int port, const std::string& secret,
                                          int local_rank) {
  static const char* kOurs[] = {"MASTER_ADDR", "MASTER_PORT",  "RANK",
                                "WORLD_SIZE",  "LOCAL_RANK",   "LOCAL_WORLD_SIZE",
                                "GROUP_RANK",  "BRAID_SECRET", "BRAID_STORE_HOSTED"};
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool ours = false;
    for (const char* n : kOurs) ours = ours || name == n;
    if (!ours) env.push_back(entry);
  }
  env.push_back("MASTER_ADDR=" + o.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("RANK=" + std::to_string(o.node_rank * o.nproc + local_rank));
  env.push_back("WORLD_SIZE=" + std::to_string(o.nnodes * o.nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(local_rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o.nproc));
  env.push_back("GROUP_RANK=" + std::to_string(o.node_rank));
  env.push_back("BRAID_SECRET=" + secret);
  env.push_back("BRAID_STORE_HOSTED=1");
  return env;
}

// Starts one rank in its own process group. Returns the pid or -1 (message printed).
pid_t SpawnRank(const Options& o, int port, const std::string& secret, int local_rank, int out_fd,
                int err_fd) {
  std::vector<std::string> env_strings = ChildEnvironment(o, port, secret, local_rank);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(&s[0]);
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(&s[0]);
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    Say("cannot start '" + o.command[0] + "': " + std::strerror(rc));
    return -1;
  }
  return pid;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Node 0 hosts the store, so it leaves the exit barrier last: every other node says it has seen
// "done", and node 0 waits (a few seconds at most) until all have. Otherwise node 0 could close
// the store while another node's wait for "done" was still unanswered, and that node would report
// a lost store although the job ended well (seen with 4 nodes). Errors after "done" mean nothing.
constexpr int kLeaveWaitMs = 5000;
void LeaveExitBarrier(const Options& o, TcpStoreClient& client) {
  const Deadline deadline = Deadline::AfterMs(kLeaveWaitMs);
  if (o.node_rank != 0) {
    Result<int64_t> left = client.Add("braidrun/exit/left", 1, deadline);
    if (left.ok() && left.value() == o.nnodes - 1) {
      (void)client.Set("braidrun/exit/all_left", "1", deadline);
    }
    return;
  }
  (void)client.Wait({"braidrun/exit/all_left"}, deadline);
}

// Multi-node jobs: node 0 must keep its store up until the ranks of every node are done, so each
// node's braidrun, once its own ranks have exited, checks in and waits for all nodes (torchrun's
// "exit barrier"). Waits in slices so that SIGINT/SIGTERM still end it.
void ExitBarrier(const Options& o, int port, const std::string& secret, int sfd) {
  Deadline deadline = Deadline::AfterMs(kExitBarrierMs);
  auto client = TcpStoreClient::Connect(o.master_addr, port, secret, deadline.Min(30000));
  if (!client.ok()) {
    Say("exit barrier skipped: " + client.status().ToString());
    return;
  }
  Result<int64_t> arrived = (*client)->Add("braidrun/exit/arrived", 1, deadline);
  if (arrived.ok() && arrived.value() == o.nnodes) {
    (void)(*client)->Set("braidrun/exit/done", "1", deadline);
  }
  while (!deadline.Expired()) {
    Status s = (*client)->Wait({"braidrun/exit/done"}, deadline.Min(500));
    if (s.ok()) {
      LeaveExitBarrier(o, **client);
      return;
    }
    if (s.code() != Code::kTimeout) {
      Say("exit barrier: " + s.ToString());
      return;
    }
    pollfd pfd{sfd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) > 0) {
      Say("exit barrier interrupted by a signal");
      return;
    }
  }
  Say("exit barrier: not every node finished within " + std::to_string(kExitBarrierMs / 1000) +
      " s; exiting anyway");
}

int Run(int argc, char** argv) {
  Result<Options> parsed = ParseArgs(argc, argv);
  if (!parsed.ok()) {
    WriteAll(2, "braidrun: " + parsed.status().message() + "\n\n" + kUsage);
    return kUsageExit;
  }
  Options o = std::move(parsed).value();
  if (o.help) {
    WriteAll(1, kUsage);
    return 0;
  }
  const char* env_secret = std::getenv("BRAID_SECRET");
  std::string secret = env_secret != nullptr ? env_secret : "";
  if (secret.empty()) {
    if (o.nnodes > 1) {
      Say("BRAID_SECRET is not set: with --nnodes > 1 every node must export the same "
          "BRAID_SECRET (e.g. BRAID_SECRET=$(openssl rand -hex 16)) before starting braidrun");
      return kUsageExit;
    }
    secret = RandomSecret();
    if (secret.empty()) {
      Say("cannot generate BRAID_SECRET: no random source (getrandom, /dev/urandom)");
      return 1;
    }
  }

  // Block the signals we handle before any thread starts (the store server thread inherits the
  // mask), so that they are read only through the signalfd below.
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&handled, sig);
  sigprocmask(SIG_BLOCK, &handled, nullptr);
  signal(SIGPIPE, SIG_IGN);
  int sfd = signalfd(-1, &handled, SFD_CLOEXEC);
  if (sfd < 0) {
    Say(std::string("signalfd: ") + std::strerror(errno));
    return 1;
  }

  std::unique_ptr<TcpStoreServer> server;
  int port = o.master_port;
  if (o.node_rank == 0) {
    StoreServerOptions options;
    options.secret = secret;
    // A single-node job listens only where its ranks connect; a multi-node one everywhere.
    std::string bind = o.nnodes == 1 ? o.master_addr : "";
    auto started = TcpStoreServer::Start(bind, port < 0 ? 0 : port, options);
    if (!started.ok()) {
      Say("cannot host the store: " + started.status().ToString());
      return 1;
    }
    server = std::move(started).value();
    port = server->port();
  }

  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  std::vector<OutputStream> streams;
  int first_failure = 0;
  bool stopping = false;
  int64_t kill_at = -1;  // when SIGKILL follows SIGTERM
  int interrupted_by = 0;
  auto signal_all = [&](int sig) {
    for (Rank& r : ranks) {
      if (r.running) ::kill(-r.pid, sig);
    }
  };
  auto stop_all = [&](int sig) {
    if (!stopping) {
      stopping = true;
      kill_at = NowMs() + kGraceMs;
    }
    signal_all(sig);
  };

  const std::vector<int> cpus = AllowedCpus();
  for (int local = 0; local < o.nproc; ++local) {
    int global = o.node_rank * o.nproc + local;
    int out_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    if (o.prefix) {
      if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
        Say(std::string("pipe: ") + std::strerror(errno));
        first_failure = 1;
        stop_all(SIGTERM);
        break;
      }
    }
    pid_t pid = -1;
    {
      ScopedThreadAffinity bound(CpusForRank(o.bind, local, o.nproc, cpus));
      if (!bound.error().empty()) Say("rank " + std::to_string(global) + ": " + bound.error());
      pid = SpawnRank(o, port, secret, local, out_pipe[1], err_pipe[1]);
    }
    if (o.prefix) {
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      std::string prefix = "[" + std::to_string(global) + "] ";
      if (pid > 0) {
        streams.push_back(OutputStream{out_pipe[0], 1, prefix, ""});
        streams.push_back(OutputStream{err_pipe[0], 2, prefix, ""});
      } else {
        ::close(out_pipe[0]);
        ::close(err_pipe[0]);
      }
    }
    ranks[local].rank = global;
    if (pid < 0) {
      first_failure = 127;
      stop_all(SIGTERM);
      break;
    }
    ranks[local].pid = pid;
    ranks[local].running = true;
  }

  int64_t drain_until = -1;
  for (;;) {
    int running = 0;
    for (const Rank& r : ranks) running += r.running ? 1 : 0;
    int open_streams = 0;
    for (const OutputStream& s : streams) open_streams += s.fd >= 0 ? 1 : 0;
    if (running == 0) {
      if (open_streams == 0) break;
      if (drain_until < 0) drain_until = NowMs() + kDrainMs;
      if (NowMs() >= drain_until) break;  // a leftover grandchild holds a pipe open
    }
    int timeout = 1000;
    if (kill_at >= 0) timeout = static_cast<int>(std::max<int64_t>(0, kill_at - NowMs()));
    if (drain_until >= 0) timeout = static_cast<int>(std::max<int64_t>(0, drain_until - NowMs()));

    std::vector<pollfd> fds;
    fds.push_back({sfd, POLLIN, 0});
    std::vector<size_t> which;
    for (size_t k = 0; k < streams.size(); ++k) {
      if (streams[k].fd >= 0) {
        fds.push_back({streams[k].fd, POLLIN, 0});
        which.push_back(k);
      }
    }
    int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) {
      Say(std::string("poll: ") + std::strerror(errno));
      break;
    }
    for (size_t k = 1; rc > 0 && k < fds.size(); ++k) {
      if (fds[k].revents != 0) streams[which[k - 1]].Pump();
    }
    if (rc > 0 && fds[0].revents != 0) {
      signalfd_siginfo info;
      if (::read(sfd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig != SIGCHLD && interrupted_by == 0) {  // SIGCHLD: reaped below in any case
          interrupted_by = sig;
          Say(std::string("got ") + strsignal(sig) + "; forwarding it to the ranks");
          stop_all(sig);
        } else if (sig != SIGCHLD) {
          Say("second signal: killing the ranks");
          signal_all(SIGKILL);
        }
      }
    }
    // Reap whatever exited (SIGCHLD may be coalesced, so look at every rank).
    for (Rank& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      pid_t done = ::waitpid(r.pid, &status, WNOHANG);
      if (done != r.pid) continue;
      r.running = false;
      int code = ExitCodeOf(status);
      if (code != 0 && first_failure == 0) {
        first_failure = code;
        if (!stopping) {
          Say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " +
              Describe(status) + "; stopping the other ranks");
          stop_all(SIGTERM);
        }
      }
      // Whatever the rank left behind in its group goes with it once the job is stopping.
      if (stopping) ::kill(-r.pid, SIGKILL);
    }
    if (kill_at >= 0 && NowMs() >= kill_at) {
      bool any = false;
      for (const Rank& r : ranks) any = any || r.running;
      if (any)
        Say("ranks still running " + std::to_string(kGraceMs) + " ms after SIGTERM: SIGKILL");
      signal_all(SIGKILL);
      kill_at = -1;
    }
  }
  for (OutputStream& s : streams) {
    if (s.fd >= 0) ::close(s.fd);
  }
  if (o.nnodes > 1 && interrupted_by == 0) ExitBarrier(o, port, secret, sfd);
  if (server) server->Stop();
  if (first_failure != 0) return first_failure;
  if (interrupted_by != 0) return 128 + interrupted_by;
  return 0;
}

}  // namespace
}  // namespace braid::rendezvous

int main(int argc, char** argv) { return braid::rendezvous::Run(argc, argv); }
