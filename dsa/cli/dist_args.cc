#include "dsa/cli/dist_args.h"

#include <fmt/format.h>

#include "dsa/cli/engine_args.h"

namespace dsa::cli {

void add_dist_options(CLI::App& cmd, DistArgs& a) {
  cmd.add_option("--nnodes", a.nnodes,
                 "Nodes of a multi-node run, each running the same command with its own "
                 "--node-rank; each node's launcher starts --dp-size / --nnodes ranks, node 0's "
                 "rank 0 writes the output (generate) or serves HTTP (serve)")
      ->capture_default_str();
  cmd.add_option("--node-rank", a.node_rank, "This node's rank, in [0, --nnodes)")
      ->capture_default_str();
  cmd.add_option("--dist-init-addr", a.dist_init_addr,
                 "host:port where global rank 0 (node 0) listens for the other ranks' bootstrap "
                 "(required with --nnodes > 1; the same on every node)");
  for (const char* name : {"--nnodes", "--node-rank"}) cmd.get_option(name)->check(int64_range());
}

StatusOr<DistSetup> resolve_dist_args(const DistArgs& a) {
  if (a.nnodes < 1 || a.nnodes > kMaxNodes) {
    return invalid_argument(fmt::format("--nnodes = {}: must be in [1, {}]", a.nnodes, kMaxNodes));
  }
  if (a.node_rank < 0 || a.node_rank >= a.nnodes) {
    return invalid_argument(fmt::format("--node-rank = {}: must be in [0, {}) (--nnodes = {})",
                                        a.node_rank, a.nnodes, a.nnodes));
  }
  DistSetup s;
  s.nnodes = int32_t(a.nnodes);
  s.node_rank = int32_t(a.node_rank);
  if (!a.dist_init_addr.empty()) {
    StatusOr<dist::InitAddr> addr = dist::parse_init_addr(a.dist_init_addr);
    // parse_init_addr's message starts "dist-init-addr = '<text>'": the flag as typed.
    if (!addr.ok()) return invalid_argument("--" + addr.status().message());
    s.init_addr = *addr;
  } else if (a.nnodes > 1) {
    return invalid_argument(fmt::format(
        "--nnodes = {} needs --dist-init-addr host:port (where node 0's rank 0 listens; the same "
        "on every node)",
        a.nnodes));
  }
  return s;
}

}  // namespace dsa::cli
