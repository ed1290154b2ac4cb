// The rank that launcher_test.cc launches (test-only binary). It reads its rank with
// rank_environment() and then, by mode:
//   report DIR [ARGS...]        writes DIR/rank.<rank> = "<rank> <local> <local world> <world>
//                               <node> <LAUNCHER_TEST_MARK> <argc>" and exits 0
//   fail DIR RANK CODE          rank RANK exits with CODE after 200 ms; the others sleep 60 s
//   stubborn DIR RANK CODE      the same, but the others ignore SIGTERM
//   wait DIR                    writes DIR/ready.<rank> = its pid, then waits; on SIGTERM it
//                               writes DIR/term.<rank> and exits 0
//   count DIR [own-group]       writes DIR/ready.<rank>, waits for a SIGINT or SIGTERM, counts
//                               those that arrive within the next 500 ms, writes "<SIGINTs>
//                               <SIGTERMs>" to DIR/count.<rank> and exits 0; with own-group it
//                               first leaves the launcher's process group (and so the terminal's
//                               foreground group)
// Exit 10: no rank environment, or a refused one; 11: bad arguments.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "dsa/dist/rank_env.h"

namespace {

std::string g_dir;
int g_rank = -1;

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) std::_Exit(12);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());  // the test never reads a half-written file
}

volatile sig_atomic_t g_ints = 0, g_terms = 0;
extern "C" void on_count(int sig) {
  if (sig == SIGINT) g_ints = g_ints + 1;
  if (sig == SIGTERM) g_terms = g_terms + 1;
}

extern "C" void on_term(int) {
  // Test-only: stdio in a handler is not async-signal-safe, but the main thread is in sleep.
  write_file(g_dir + "/term." + std::to_string(g_rank), "1");
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  auto env = dsa::dist::rank_environment();
  if (!env.ok() || !env->has_value()) return 10;
  const dsa::dist::RankEnvironment& e = **env;
  if (argc < 3) return 11;
  const std::string mode = argv[1];
  g_dir = argv[2];
  g_rank = e.rank;
  if (mode == "report") {
    const char* mark = std::getenv("LAUNCHER_TEST_MARK");
    write_file(g_dir + "/rank." + std::to_string(e.rank),
               std::to_string(e.rank) + " " + std::to_string(e.local_rank) + " " +
                   std::to_string(e.local_world_size) + " " + std::to_string(e.world_size) + " " +
                   std::to_string(e.node_rank) + " " + (mark ? mark : "-") + " " +
                   std::to_string(argc));
    return 0;
  }
  if ((mode == "fail" || mode == "stubborn") && argc == 5) {
    if (e.rank == std::atoi(argv[3])) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return std::atoi(argv[4]);
    }
    if (mode == "stubborn") ::signal(SIGTERM, SIG_IGN);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "wait") {
    ::signal(SIGTERM, on_term);
    write_file(g_dir + "/ready." + std::to_string(e.rank), std::to_string(::getpid()));
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "count") {
    if (argc == 4 && std::string(argv[3]) == "own-group" && ::setpgid(0, 0) != 0) return 11;
    ::signal(SIGINT, on_count);
    ::signal(SIGTERM, on_count);
    write_file(g_dir + "/ready." + std::to_string(e.rank), std::to_string(::getpid()));
    for (int i = 0; i < 60000 && g_ints + g_terms == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    write_file(g_dir + "/count." + std::to_string(e.rank),
               std::to_string(g_ints) + " " + std::to_string(g_terms));
    return 0;
  }
  return 11;
}
