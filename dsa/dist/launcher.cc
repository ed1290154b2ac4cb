#include "dsa/dist/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <string_view>

#include "dsa/dist/rank_env.h"

extern char** environ;

namespace dsa::dist {

namespace {

using Clock = std::chrono::steady_clock;

// The handlers only write the signal's number to a pipe (async-signal-safe); the wait loop polls
// its other end, so it wakes for a child's exit or a signal without racing a flag check against
// a sleep. Handlers are process-wide, so the byte arrives whichever thread took the signal.
int g_wake_write_fd = -1;
std::atomic<bool> g_launching{false};

// Marks a signal the terminal sent (Ctrl-C: si_code SI_KERNEL). The terminal signals its whole
// foreground process group, the children included, so forwarding it would deliver it twice, and
// `dsa serve` takes a second signal as "stop now, do not drain".
constexpr uint8_t kFromTerminal = 0x80;

extern "C" void on_launcher_signal(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  const auto b = uint8_t(sig | (info != nullptr && info->si_code == SI_KERNEL ? kFromTerminal : 0));
  [[maybe_unused]] const ssize_t n = ::write(g_wake_write_fd, &b, 1);  // full pipe: already awake
  errno = saved;
}

constexpr int kCaught[] = {SIGINT, SIGTERM, SIGCHLD};

// Installs the handlers and the pipe for one launch; restores the previous ones on destruction.
class SignalScope {
 public:
  Status install() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
      return internal_error(fmt::format("launcher: pipe2: {}", std::strerror(errno)));
    }
    g_wake_write_fd = fds_[1];
    struct sigaction sa {};
    sa.sa_sigaction = on_launcher_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kCaught); ++i) ::sigaction(kCaught[i], &sa, &previous_[i]);
    // A caller that blocked them (a sigwait thread) must not keep the launcher from waking.
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kCaught) sigaddset(&set, sig);
    ::pthread_sigmask(SIG_UNBLOCK, &set, &previous_mask_);
    installed_ = true;
    return ok_status();
  }
  ~SignalScope() {
    if (installed_) {
      for (size_t i = 0; i < std::size(kCaught); ++i)
        ::sigaction(kCaught[i], &previous_[i], nullptr);
      ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
      g_wake_write_fd = -1;
    }
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  int read_fd() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
  struct sigaction previous_[std::size(kCaught)]{};
  sigset_t previous_mask_{};
  bool installed_ = false;
};

struct Child {
  pid_t pid = -1;
  int32_t rank = 0, local_rank = 0;
  bool running = false;
};

// This process's environment without any DSA_* rank variable, then this child's.
std::vector<std::string> child_environment(const LaunchConfig& c, int32_t local_rank) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    bool ours = false;
    for (const char* name :
         {kEnvRank, kEnvLocalRank, kEnvLocalWorldSize, kEnvWorldSize, kEnvNodeRank}) {
      const size_t n = std::strlen(name);
      ours = ours || (kv.size() > n && kv.compare(0, n, name) == 0 && kv[n] == '=');
    }
    if (!ours) env.emplace_back(kv);
  }
  const int32_t w = c.local_world_size;
  env.push_back(fmt::format("{}={}", kEnvRank, c.node_rank * w + local_rank));
  env.push_back(fmt::format("{}={}", kEnvLocalRank, local_rank));
  env.push_back(fmt::format("{}={}", kEnvLocalWorldSize, w));
  env.push_back(fmt::format("{}={}", kEnvWorldSize, w * c.nnodes));
  env.push_back(fmt::format("{}={}", kEnvNodeRank, c.node_rank));
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (std::string& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// Forks one child that execs c.executable. Everything it touches between fork and exec was made
// before the fork: a multi-threaded parent's child may not allocate. An exec failure comes back
// as errno through a close-on-exec pipe (no bytes: the exec succeeded).
StatusOr<pid_t> spawn(const LaunchConfig& c, int32_t local_rank) {
  std::vector<std::string> args = c.argv, env = child_environment(c, local_rank);
  std::vector<char*> argv = c_strings(args), envp = c_strings(env);
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return internal_error(fmt::format("pipe2: {}", std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return internal_error(fmt::format("fork: {}", std::strerror(e)));
  }
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kCaught) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // A launcher killed outright (SIGKILL, OOM) cannot take its children down itself.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // it died before the prctl
    ::execve(c.executable.c_str(), argv.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] const ssize_t n = ::write(err_pipe[1], &e, sizeof(e));
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  int e = 0;
  ssize_t got;
  do {
    got = ::read(err_pipe[0], &e, sizeof(e));
  } while (got < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (got == ssize_t(sizeof(e))) {
    ::waitpid(pid, nullptr, 0);
    return failed_precondition(fmt::format("local rank {} could not exec '{}': {}", local_rank,
                                           c.executable, std::strerror(e)));
  }
  return pid;
}

std::string describe_exit(const LaunchConfig& c, const Child& child, int status) {
  const std::string who =
      fmt::format("rank {} (local rank {}, node {})", child.rank, child.local_rank, c.node_rank);
  if (WIFSIGNALED(status)) {
    return fmt::format("{} was killed by signal {} ({})", who, WTERMSIG(status),
                       ::strsignal(WTERMSIG(status)));
  }
  return fmt::format("{} exited with code {}", who, WEXITSTATUS(status));
}

void signal_running(std::vector<Child>& children, int sig) {
  for (const Child& ch : children) {
    if (ch.running) ::kill(ch.pid, sig);
  }
}

Status check_config(const LaunchConfig& c) {
  if (c.local_world_size < 1 || c.local_world_size > kMaxLocalRanks) {
    return invalid_argument(fmt::format("launcher: local_world_size = {}: must be in [1, {}]",
                                        c.local_world_size, kMaxLocalRanks));
  }
  if (c.nnodes < 1 || int64_t(c.nnodes) * c.local_world_size > INT32_MAX) {
    return invalid_argument(fmt::format(
        "launcher: nnodes = {}: must be >= 1, with nnodes * {} ranks in the 32-bit range", c.nnodes,
        c.local_world_size));
  }
  if (c.node_rank < 0 || c.node_rank >= c.nnodes) {
    return invalid_argument(
        fmt::format("launcher: node_rank = {}: must be in [0, {})", c.node_rank, c.nnodes));
  }
  if (c.argv.empty()) return invalid_argument("launcher: argv is empty (argv[0] is needed)");
  DSA_ASSIGN_OR_RETURN(const std::optional<RankEnvironment> env, rank_environment());
  if (env) {
    // A rank that launched again would fork W more ranks with the same numbers.
    return failed_precondition(fmt::format(
        "launcher: this process is itself rank {} of {} ({} is set): a launched rank must run, "
        "not launch",
        env->rank, env->world_size, kEnvRank));
  }
  return ok_status();
}

}  // namespace

Status launch_local_ranks(const LaunchConfig& config) {
  DSA_RETURN_IF_ERROR(check_config(config));
  // The signal handlers and their pipe are process-wide: two launches would share them.
  DSA_CHECK(!g_launching.exchange(true));
  struct Done {
    ~Done() { g_launching = false; }
  } done;
  SignalScope signals;
  DSA_RETURN_IF_ERROR(signals.install());

  std::vector<Child> children;
  Status first_failure;
  const char* received = nullptr;  // the last SIGINT / SIGTERM, forwarded or from the terminal
  std::optional<Clock::time_point> kill_at;  // set when the survivors of a failure got SIGTERM
  bool killed = false;
  const auto stop_the_rest = [&](Status why) {
    if (first_failure.ok()) first_failure = std::move(why);
    if (!kill_at) {
      signal_running(children, SIGTERM);
      kill_at = Clock::now() + config.grace;
    }
  };
  for (int32_t l = 0; l < config.local_world_size && first_failure.ok(); ++l) {
    StatusOr<pid_t> pid = spawn(config, l);
    if (!pid.ok()) {
      stop_the_rest(pid.status());
      break;
    }
    children.push_back({*pid, config.node_rank * config.local_world_size + l, l, true});
  }

  size_t num_running = children.size();
  while (num_running > 0) {
    int timeout_ms = 1000;  // a bound only: the pipe wakes the loop for every signal
    if (kill_at && !killed) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*kill_at - Clock::now());
      timeout_ms = int(std::clamp<int64_t>(left.count(), 0, timeout_ms));
    }
    pollfd pfd{signals.read_fd(), POLLIN, 0};
    ::poll(&pfd, 1, timeout_ms);
    uint8_t sigs[64];
    ssize_t n;
    while ((n = ::read(signals.read_fd(), sigs, sizeof(sigs))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        const int sig = sigs[i] & ~kFromTerminal;
        if (sig != SIGINT && sig != SIGTERM) continue;
        if ((sigs[i] & kFromTerminal) == 0) signal_running(children, sig);
        received = sig == SIGINT ? "SIGINT" : "SIGTERM";
      }
    }
    // Of the ranks found dead in one round, one killed by a signal is named before those that
    // exited non-zero: when a rank dies, the others see their group break and exit with an error
    // of their own, and the one that died first is the one to name.
    std::optional<Status> exited, signalled;
    for (Child& ch : children) {
      int status = 0;
      if (!ch.running || ::waitpid(ch.pid, &status, WNOHANG) != ch.pid) continue;
      ch.running = false;
      --num_running;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      std::optional<Status>& slot = WIFSIGNALED(status) ? signalled : exited;
      if (!slot) slot = internal_error(describe_exit(config, ch, status));
    }
    if (signalled || exited) stop_the_rest(signalled ? *signalled : *exited);
    if (num_running > 0 && kill_at && !killed && Clock::now() >= *kill_at) {
      signal_running(children, SIGKILL);  // certain: the next rounds reap them
      killed = true;
    }
  }
  if (first_failure.ok()) return ok_status();
  std::string message = "launcher: " + first_failure.message();
  if (received != nullptr) {
    message += fmt::format(" (after the launcher received {})", received);
  }
  if (children.size() > 1) message += "; the other ranks were stopped";
  return Status(first_failure.code(), message);
}

}  // namespace dsa::dist
