// What every command with one process per rank shares (`dsa generate` and `dsa serve` with
// --dp-processes, or --nnodes > 1; docs/multi_gpu.md "Process model"): the rendezvous address the
// launcher hands its ranks, and a rank's way into the process group.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dsa/cli/engine_args.h"
#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/dist/rank_env.h"
#include "dsa/model/dsa_model.h"

namespace dsa::cli {

// What the launcher passes to its ranks besides dist/rank_env.h's variables.
inline constexpr const char* kEnvInitAddr = "DSA_DIST_INIT_ADDR";  // host:port of rank 0

// The launcher's side: --dist-init-addr when given (required with several nodes), else a free
// port on 127.0.0.1, as "host:port"; exported to the ranks as kEnvInitAddr.
StatusOr<std::string> export_init_addr(const EngineSetup& setup);

// This node's share of the ranks (resolve_engine_args checked that the nodes split them evenly):
// `local` rank processes, global ranks first .. first + local - 1, one per `per` ("GPU" on cuda).
struct NodeRanks {
  int32_t local = 1, first = 0;
  const char* per = "rank";
};
NodeRanks node_ranks(const EngineSetup& setup);

// Starts this node's ranks of this process's command line (command_line.h) and waits for them
// (dist::launch_local_ranks: the first that fails stops the others, named in the error).
Status launch_node_ranks(const EngineSetup& setup);

// A rank's side: checks the launcher's environment against the flags (world size = --dp-size),
// then joins the group at kEnvInitAddr (make_rank_group). Errors name the variable or the rank.
StatusOr<std::unique_ptr<dist::Collective>> join_rank_group(const dist::RankEnvironment& env,
                                                            const EngineSetup& setup,
                                                            uint64_t flags_hash);

// The group of one rank: NCCL on cuda (rank 0's id handed over by dist/bootstrap.h; the device is
// chosen first), TCP on the cpu (rank_group.cc; the NCCL part only in builds with NCCL).
StatusOr<std::unique_ptr<dist::Collective>> make_rank_group(const dist::RankEnvironment& env,
                                                            const EngineSetup& setup,
                                                            const std::string& init_addr,
                                                            uint64_t flags_hash);

// A rank process's model options, from the command's (`mo`): on the cpu the ranks share the host's
// memory, so each plans 1 / --dp-size of --mem-fraction-static (on cuda each GPU is its own), and
// with --ep-size the MoE's collectives are the process group's (SocketGroup's host-memory ones on
// the cpu).
Status adapt_to_rank_process(const EngineSetup& setup, dist::Collective& group,
                             model::ModelOptions* mo);

}  // namespace dsa::cli
