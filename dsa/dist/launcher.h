// The single-node launcher of docs/multi_gpu.md ("Process model"): one process per GPU. The
// command's process forks W children that each exec the same binary with the same arguments and
// with their rank in the environment (rank_env.h), then waits for all of them. A rank that dies
// leaves the others blocked in a collective, so the first child that fails takes the others down
// with it: SIGTERM, then SIGKILL after a grace period. On several nodes each node runs one
// launcher with its node rank; the ranks then meet through the bootstrap (bootstrap.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dsa/core/status.h"

namespace dsa::dist {

// Most ranks one node runs: 8 GPUs is the usual node; the bound keeps a typo from forking a storm.
inline constexpr int32_t kMaxLocalRanks = 64;

struct LaunchConfig {
  int32_t local_world_size = 1;  // W: children on this node, local ranks 0 .. W-1
  int32_t node_rank = 0;         // in [0, nnodes): global rank = node_rank * W + local rank
  int32_t nnodes = 1;
  // What every child execs. The dsa binary re-executes itself; tests run a helper binary.
  std::string executable = "/proc/self/exe";
  std::vector<std::string> argv;  // argv[0] included, passed unchanged to every child
  // Between the SIGTERM to the survivors of a failure and the SIGKILL: the time a rank has to
  // flush what it writes and exit on its own.
  std::chrono::milliseconds grace{3000};
};

// Starts the children and waits for all of them. Every child gets this process's environment plus
// the DSA_* rank variables; it starts in this process's process group, and is killed (SIGKILL) if
// the launcher dies without reaping it. SIGINT and SIGTERM sent to the launcher while it waits are
// forwarded to every child still running, except those the terminal sent (Ctrl-C): the terminal
// signals the whole foreground process group, so each child has it already, once. (A kill of the
// whole group, `kill -INT -PGID`, still reaches a child twice: nothing tells it from a kill of the
// launcher alone.)
//
// OK when every child exits 0. Otherwise an Internal error naming the first rank that failed and
// how ("rank 2 (local rank 2, node 0) exited with code 3"; "... was killed by signal 9 (Killed)"),
// after every other child has been reaped; or an error naming the executable when a child could
// not exec it (the children already started are terminated the same way). InvalidArgument for a
// config outside its ranges. Not reentrant: one launch per process at a time (the signal handlers
// are process-wide; the previous ones are restored on return).
Status launch_local_ranks(const LaunchConfig& config);

}  // namespace dsa::dist
