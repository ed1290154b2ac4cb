// `dsa serve` with one process per data-parallel rank (docs/multi_gpu.md, "dsa serve over rank
// processes"): `--dp-processes`, implied by `--device cuda --dp-size N` (one process per GPU) and
// by `--nnodes` > 1. The command's process becomes the launcher (dist/launcher.h) and starts N
// copies of its own command line; global rank 0 is the server (the HTTP front, its own engine,
// server/engine_loop.h's create_front); every other rank runs server/rank_follower.h's loop: no
// port of its own, its requests placed on it by the front. Signals go to the front: the launcher
// forwards SIGINT / SIGTERM to every rank, the followers ignore them, and the front drains and then
// tells them to stop. A rank that fails ends its process non-zero, and the launcher stops the
// others (the server with them), naming it.
#pragma once

#include <memory>

#include "dsa/cli/engine_args.h"
#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/tokenizer.h"

namespace dsa::cli {

// The launcher's side: starts this node's ranks and waits; the exit code for the command (1, with
// the failing rank named on stderr, if a rank failed).
StatusOr<int> launch_serve_ranks(const EngineSetup& setup);

// How the ranks agree that every one of them has loaded its model (one all-reduce, after each
// rank's load, before the front says it is ready): the worst of the ranks' outcomes.
enum class LoadOutcome : int64_t { kLoaded = 0, kAbandoned = 1, kFailed = 2 };
StatusOr<LoadOutcome> agree_on_load(dist::Collective& group, LoadOutcome mine);

// A rank > 0: loads its model, agrees on the load with the others, then follows the front until
// it stops. OK when the front stopped the ranks (or abandoned the start); the error otherwise.
Status run_serve_follower(const EngineArgs& args, const EngineSetup& setup,
                          const model::Tokenizer& tok, dist::Collective& group);

// The engine options of every rank of `dsa serve` (the front's and the followers').
engine::EngineOptions serve_engine_options(const EngineSetup& setup, const model::Tokenizer* tok);

}  // namespace dsa::cli
