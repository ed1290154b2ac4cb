// The launcher with real processes: launcher_test_child (DSA_LAUNCHER_TEST_CHILD) is the rank.
// Every child sees its own rank variables; a failing rank takes the sleeping ones down at once
// (SIGTERM) or after the grace period (SIGKILL, when they ignore SIGTERM) and is named in the
// Status; a SIGTERM or SIGINT to the launcher reaches every child, a Ctrl-C on the terminal
// reaches them from the terminal and is not forwarded again; a killed launcher takes its children
// with it; a bad config, an executable that does not exist and a launched rank are refused.
#include "dsa/dist/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dsa/dist/rank_env.h"
#include "dsa/testing/watchdog.h"

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// A fresh directory the children write their files to.
fs::path fresh_dir() {
  std::string tmpl = (fs::temp_directory_path() / "dsa_launcher_XXXXXX").string();
  DSA_CHECK(::mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

LaunchConfig config(int32_t w, std::vector<std::string> args) {
  LaunchConfig c;
  c.local_world_size = w;
  c.executable = DSA_LAUNCHER_TEST_CHILD;
  c.argv = {"launcher_test_child"};
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  return c;
}

// Waits until `path` exists (a child got that far), at most 10 s.
bool wait_for(const fs::path& path) {
  for (auto end = Clock::now() + 10s; Clock::now() < end; std::this_thread::sleep_for(5ms)) {
    if (fs::exists(path)) return true;
  }
  return false;
}

TEST(Launcher, ThreeRanksOfNodeOneEachSeeTheirEnvironment) {
  dsa::testing::within_seconds(30, [] {
    const fs::path dir = fresh_dir();
    LaunchConfig c = config(3, {"report", dir.string(), "an extra argument"});
    c.node_rank = 1;
    c.nnodes = 2;
    ::setenv("LAUNCHER_TEST_MARK", "inherited", 1);
    const Status s = launch_local_ranks(c);
    ::unsetenv("LAUNCHER_TEST_MARK");
    ASSERT_TRUE(s.ok()) << s.to_string();
    // Global ranks 3, 4, 5 = node 1 * 3 + local 0, 1, 2, of a world of 6; argv passed unchanged.
    for (int local = 0; local < 3; ++local) {
      const int rank = 3 + local;
      EXPECT_EQ(read_file(dir / ("rank." + std::to_string(rank))),
                fmt::format("{} {} 3 6 1 inherited 4", rank, local))
          << "rank " << rank;
    }
    EXPECT_FALSE(fs::exists(dir / "rank.0"));
    fs::remove_all(dir);
  });
}

TEST(Launcher, AFailingRankStopsTheOthersAtOnceAndIsNamed) {
  dsa::testing::within_seconds(30, [] {
    const fs::path dir = fresh_dir();
    LaunchConfig c = config(3, {"fail", dir.string(), "1", "3"});
    c.grace = 5000ms;
    const auto t0 = Clock::now();
    const Status s = launch_local_ranks(c);
    const auto took = Clock::now() - t0;
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("rank 1 (local rank 1, node 0) exited with code 3"),
              std::string::npos)
        << s.to_string();
    EXPECT_NE(s.message().find("the other ranks were stopped"), std::string::npos);
    // The others sleep 60 s; SIGTERM ends them well before the 5 s grace would need SIGKILL.
    EXPECT_LT(took, 3s);
    fs::remove_all(dir);
  });
}

TEST(Launcher, RanksThatIgnoreSigtermAreKilledAfterTheGrace) {
  dsa::testing::within_seconds(30, [] {
    const fs::path dir = fresh_dir();
    LaunchConfig c = config(3, {"stubborn", dir.string(), "2", "7"});
    c.grace = 400ms;
    const auto t0 = Clock::now();
    const Status s = launch_local_ranks(c);
    const auto took = Clock::now() - t0;
    ASSERT_FALSE(s.ok());
    // The SIGKILLed ranks fail later; the first failure is the one named.
    EXPECT_NE(s.message().find("rank 2 (local rank 2, node 0) exited with code 7"),
              std::string::npos)
        << s.to_string();
    EXPECT_GE(took, 400ms + 200ms);  // rank 2's 200 ms, then the whole grace
    EXPECT_LT(took, 5s);
    fs::remove_all(dir);
  });
}

TEST(Launcher, ARankKilledByASignalIsNamedWithTheSignal) {
  dsa::testing::within_seconds(30, [] {
    // Rank 1 kills itself; rank 0 becomes a sleep (exec: no orphaned grandchild when it ends).
    LaunchConfig c = config(2, {"-c", "[ \"$DSA_RANK\" = 1 ] && kill -9 $$; exec sleep 60"});
    c.executable = "/bin/sh";
    c.argv[0] = "sh";
    const Status s = launch_local_ranks(c);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank 1 (local rank 1, node 0) was killed by signal 9"),
              std::string::npos)
        << s.to_string();
  });
}

// Runs launch_local_ranks(c) in a forked process (the one signals are sent to); it exits 0 when
// the launch returned OK, 1 otherwise.
pid_t fork_launcher(const LaunchConfig& c) {
  const pid_t pid = ::fork();
  DSA_CHECK(pid >= 0);
  if (pid == 0) ::_exit(launch_local_ranks(c).ok() ? 0 : 1);
  return pid;
}

TEST(Launcher, SigtermToTheLauncherReachesEveryChild) {
  dsa::testing::within_seconds(30, [] {
    const fs::path dir = fresh_dir();
    const pid_t launcher = fork_launcher(config(3, {"wait", dir.string()}));
    for (int r = 0; r < 3; ++r) ASSERT_TRUE(wait_for(dir / ("ready." + std::to_string(r))));
    ASSERT_EQ(::kill(launcher, SIGTERM), 0);
    int st = 0;
    ASSERT_EQ(::waitpid(launcher, &st, 0), launcher);
    // Each child took the SIGTERM (its handler wrote term.<rank>) and exited 0, so the launch did.
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(fs::exists(dir / ("term." + std::to_string(r)))) << "rank " << r;
    }
    fs::remove_all(dir);
  });
}

// Waits for a "count" launch to end (exit 0) and checks each child's "<SIGINTs> <SIGTERMs>".
void expect_counts(const fs::path& dir, pid_t launcher, int w, const std::string& counts) {
  int st = 0;
  ASSERT_EQ(::waitpid(launcher, &st, 0), launcher);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  for (int r = 0; r < w; ++r) {
    EXPECT_EQ(read_file(dir / ("count." + std::to_string(r))), counts) << "rank " << r;
  }
}

TEST(Launcher, SigintToTheLauncherReachesEveryChild) {
  dsa::testing::within_seconds(30, [] {
    const fs::path dir = fresh_dir();
    const pid_t launcher = fork_launcher(config(2, {"count", dir.string()}));
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(wait_for(dir / ("ready." + std::to_string(r))));
    ASSERT_EQ(::kill(launcher, SIGINT), 0);
    expect_counts(dir, launcher, 2, "1 0");
    fs::remove_all(dir);
  });
}

// Forks a launcher of `c` in a session of its own on a new pseudo-terminal; `master` is the
// terminal's other end, where a written ^C makes the terminal signal its foreground group.
pid_t fork_launcher_on_a_terminal(const LaunchConfig& c, int* master) {
  *master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  DSA_CHECK(*master >= 0 && ::grantpt(*master) == 0 && ::unlockpt(*master) == 0);
  const std::string slave = ::ptsname(*master);
  const pid_t pid = ::fork();
  DSA_CHECK(pid >= 0);
  if (pid == 0) {
    if (::setsid() < 0) ::_exit(20);
    const int tty = ::open(slave.c_str(), O_RDWR);
    if (tty < 0 || ::ioctl(tty, TIOCSCTTY, 0) != 0) ::_exit(21);
    ::_exit(launch_local_ranks(c).ok() ? 0 : 1);
  }
  return pid;
}

TEST(Launcher, CtrlCOnTheTerminalReachesEveryChild) {
  dsa::testing::within_seconds(30, [] {
    const fs::path dir = fresh_dir();
    int master = -1;
    const pid_t launcher = fork_launcher_on_a_terminal(config(2, {"count", dir.string()}), &master);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(wait_for(dir / ("ready." + std::to_string(r))));
    ASSERT_EQ(::write(master, "\x03", 1), 1);
    expect_counts(dir, launcher, 2, "1 0");
    ::close(master);
    fs::remove_all(dir);
  });
}

TEST(Launcher, TheTerminalsCtrlCIsNotForwarded) {
  dsa::testing::within_seconds(30, [] {
    // The children leave the terminal's foreground group, so only the launcher gets the ^C; it
    // must not pass it on (the children in the group have it already: a second one would make
    // `dsa serve` skip its drain). A SIGTERM sent to the launcher afterwards is forwarded.
    const fs::path dir = fresh_dir();
    int master = -1;
    const pid_t launcher =
        fork_launcher_on_a_terminal(config(2, {"count", dir.string(), "own-group"}), &master);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(wait_for(dir / ("ready." + std::to_string(r))));
    ASSERT_EQ(::write(master, "\x03", 1), 1);
    std::this_thread::sleep_for(300ms);  // a forwarded SIGINT would arrive well within this
    ASSERT_EQ(::kill(launcher, SIGTERM), 0);
    expect_counts(dir, launcher, 2, "0 1");
    ::close(master);
    fs::remove_all(dir);
  });
}

TEST(Launcher, AKilledLauncherTakesItsChildrenWithIt) {
  dsa::testing::within_seconds(30, [] {
    // The orphaned children are re-parented to this process, so it can reap them and see why
    // they ended.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    const fs::path dir = fresh_dir();
    const pid_t launcher = fork_launcher(config(2, {"wait", dir.string()}));
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r) {
      const fs::path ready = dir / ("ready." + std::to_string(r));
      ASSERT_TRUE(wait_for(ready));
      pids.push_back(std::stoi(read_file(ready)));
    }
    ASSERT_EQ(::kill(launcher, SIGKILL), 0);
    ASSERT_EQ(::waitpid(launcher, nullptr, 0), launcher);
    for (pid_t pid : pids) {
      int st = 0;
      ASSERT_EQ(::waitpid(pid, &st, 0), pid);
      EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
    fs::remove_all(dir);
  });
}

TEST(Launcher, RefusesABadConfigAnExecThatFailsAndALaunchedRank) {
  LaunchConfig c = config(0, {"report", "/nonexistent"});
  EXPECT_NE(launch_local_ranks(c).message().find("local_world_size = 0: must be in [1, 64]"),
            std::string::npos);
  c.local_world_size = 2;
  c.nnodes = 2;
  c.node_rank = 2;
  EXPECT_NE(launch_local_ranks(c).message().find("node_rank = 2: must be in [0, 2)"),
            std::string::npos);
  c.node_rank = 0;
  c.executable = "/nonexistent/dsa";
  const Status s = launch_local_ranks(c);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("local rank 0 could not exec '/nonexistent/dsa': No such file"),
            std::string::npos)
      << s.to_string();
  ::setenv(kEnvRank, "1", 1);
  ::setenv(kEnvLocalRank, "1", 1);
  ::setenv(kEnvLocalWorldSize, "2", 1);
  ::setenv(kEnvWorldSize, "2", 1);
  ::setenv(kEnvNodeRank, "0", 1);
  const Status nested = launch_local_ranks(config(2, {"report", "/nonexistent"}));
  for (const char* v : {kEnvRank, kEnvLocalRank, kEnvLocalWorldSize, kEnvWorldSize, kEnvNodeRank}) {
    ::unsetenv(v);
  }
  EXPECT_NE(nested.message().find("this process is itself rank 1 of 2"), std::string::npos)
      << nested.to_string();
}

}  // namespace
}  // namespace dsa::dist
