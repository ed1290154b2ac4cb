#include "dsa/cli/serve_ranks.h"

#include <fmt/format.h>

#include <cstdio>

#include "dsa/cli/rank_process.h"
#include "dsa/server/rank_follower.h"

namespace dsa::cli {

StatusOr<int> launch_serve_ranks(const EngineSetup& setup) {
  DSA_ASSIGN_OR_RETURN(const std::string addr, export_init_addr(setup));
  const NodeRanks n = node_ranks(setup);
  if (setup.dist.nnodes > 1) {
    fmt::print(stderr,
               "dsa serve: node {} of {}: starting ranks {}..{} of {} (one process per {}); rank "
               "0 {} at {}\n",
               setup.dist.node_rank, setup.dist.nnodes, n.first, n.first + n.local - 1,
               setup.dp_size, n.per,
               setup.dist.node_rank == 0 ? "(here) serves HTTP" : "serves HTTP on node 0", addr);
  } else {
    fmt::print(stderr,
               "dsa serve: starting {} rank processes (one per {}); rank 0 serves HTTP, the "
               "ranks meet at {}\n",
               setup.dp_size, n.per, addr);
  }
  std::fflush(stderr);
  if (Status launched = launch_node_ranks(setup); !launched.ok()) {
    fmt::print(stderr, "dsa serve: {}\n", launched.to_string());
    return 1;
  }
  return 0;
}

StatusOr<LoadOutcome> agree_on_load(dist::Collective& group, LoadOutcome mine) {
  int64_t worst[] = {int64_t(mine)};
  DSA_RETURN_IF_ERROR(group.all_reduce(worst, dist::ReduceOp::kMax));
  if (worst[0] < 0 || worst[0] > int64_t(LoadOutcome::kFailed)) {
    return internal_error(fmt::format("the ranks' load outcome {} is not one", worst[0]));
  }
  return LoadOutcome(worst[0]);
}

engine::EngineOptions serve_engine_options(const EngineSetup& setup, const model::Tokenizer* tok) {
  engine::EngineOptions eo;
  eo.prefill_chunk = setup.prefill_chunk;
  eo.tokenizer = tok;
  eo.simulate_accept_length = setup.simulate_accept_length;
  eo.accept_on = setup.accept_on;
  eo.overlap = setup.overlap;
  eo.device_commit = setup.device_commit;
  return eo;
}

Status run_serve_follower(const EngineArgs& args, const EngineSetup& setup,
                          const model::Tokenizer& tok, dist::Collective& group) {
  const int32_t me = group.rank();
  StatusOr<std::unique_ptr<model::DsaModel>> model = internal_error("not loaded");
  {
    StatusOr<const kernels::OpTable*> ops = kernels::ops_for(setup.backend);
    model::ModelOptions mo = setup.model;
    const Status adapted = adapt_to_rank_process(setup, group, &mo);
    if (!ops.ok()) {
      model = ops.status();
    } else if (!adapted.ok()) {
      model = adapted;
    } else {
      try {
        model = model::DsaModel::load(args.model_dir, mo, **ops);
      } catch (const std::exception& e) {
        model = internal_error(fmt::format("loading the model: {}", e.what()));
      }
    }
  }
  // Every rank takes this collective, loaded or not, so a failed load ends every rank at once.
  DSA_ASSIGN_OR_RETURN(
      const LoadOutcome all,
      agree_on_load(group, model.ok() ? LoadOutcome::kLoaded : LoadOutcome::kFailed));
  if (!model.ok()) return model.status().with_context(fmt::format("dp rank {}", me));
  if (all != LoadOutcome::kLoaded) return ok_status();  // another rank failed, or the front quit
  server::RankFollower follower(**model, serve_engine_options(setup, &tok), group);
  return follower.run();
}

}  // namespace dsa::cli
