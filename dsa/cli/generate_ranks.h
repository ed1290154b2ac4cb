// `dsa generate` with one process per data-parallel rank (docs/multi_gpu.md, "Process model"):
// `--dp-processes`, and implied by `--device cuda --dp-size N` (one process per GPU). The command's
// process becomes the launcher (dist/launcher.h): it picks the rendezvous address and a run
// directory, starts N copies of its own command line with their rank in the environment, and
// waits. Each copy finds its rank (dist/rank_env.h), takes GPU local_rank, joins the group (NCCL
// on cuda; over TCP on the cpu, dist/socket_group.h), loads its own model, runs the requests the
// shared placement gives it (every rank computes the same placement from the same prompts, so no
// message is needed) and steps with the others until no rank has work (engine/dp_rank_loop.h).
// Rank 0 writes to the terminal; the other ranks write to files in their node's run directory,
// which reach rank 0 through the group after the last step (dist/gather_text.h) and are appended
// in rank order, so the output is one stream: each rank's requests, then its summary, labelled
// with its rank. With --nnodes N every node runs this launcher with its --node-rank and starts
// its --dp-size / N ranks; they meet at --dist-init-addr, and node 0 writes the output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dsa/cli/engine_args.h"
#include "dsa/cli/rank_process.h"
#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/dist/rank_env.h"

namespace dsa::cli {

// What the launcher passes to its ranks besides rank_process.h's address.
inline constexpr const char* kEnvRunDir = "DSA_DP_RUN_DIR";  // the ranks' output files

// The launcher's side: starts this node's setup.dp_size / nnodes ranks of this process's command
// line (command_line.h) and waits for them. --dist-init-addr, when given, is where rank 0 listens
// (required with several nodes); otherwise a free port on 127.0.0.1. Returns the exit code the
// command should end with: the run's (merge_rank_outputs), or 1 with the failing rank named on
// stderr, after the output this node's ranks had written.
StatusOr<int> launch_generate_ranks(const EngineSetup& setup);

// A rank's side, once it knows it is one.
struct RankProcess {
  dist::RankEnvironment env;
  std::string run_dir;
  std::unique_ptr<dist::Collective> group;
};

// Checks the launcher's environment against the flags (world size = --dp-size), takes GPU
// local_rank on cuda, joins the group with the flags hash every rank must share, and sends a
// rank > 0's stdout to its file in the run directory. Errors name the variable or the rank.
StatusOr<RankProcess> join_generate_ranks(const dist::RankEnvironment& env,
                                          const EngineSetup& setup, uint64_t flags_hash);

// After the run: every rank flushes its output and meets the others in a collective that takes the
// highest of the ranks' exit codes, then sends its file to rank 0 (dist/gather_text.h); rank 0
// appends the texts to its stdout in rank order, and each node's local rank 0 leaves the code for
// its launcher (launch_generate_ranks returns it).
// Every rank process itself then exits 0: the launcher stops all ranks at the first non-zero exit,
// which must stay the sign of a broken rank, not of a failed request.
Status merge_rank_outputs(RankProcess& p, int exit_code);

}  // namespace dsa::cli
