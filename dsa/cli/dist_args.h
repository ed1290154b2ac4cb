// The multi-node flags of `dsa generate` and `dsa serve` (SGLang's names, docs/multi_gpu.md
// "Multi-node bootstrap"): --nnodes N --node-rank i --dist-init-addr host:port, the same on every
// node except --node-rank. Global rank 0 listens on the address for the others (dist/bootstrap.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "dsa/core/status.h"
#include "dsa/dist/bootstrap.h"

namespace dsa::cli {

// Most nodes of one run: far above any deployment, low enough that nodes x ranks stays in int32.
constexpr int64_t kMaxNodes = 1024;

struct DistArgs {
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string dist_init_addr;  // empty: not given
};

// Registers --nnodes, --node-rank and --dist-init-addr on `cmd`.
void add_dist_options(CLI::App& cmd, DistArgs& a);

struct DistSetup {
  int32_t nnodes = 1;
  int32_t node_rank = 0;
  std::optional<dist::InitAddr> init_addr;  // required when nnodes > 1
};

// The ranges, each refusal one InvalidArgument line naming the flag and value: --nnodes in
// [1, kMaxNodes], --node-rank in [0, --nnodes), --dist-init-addr a host:port (parse_init_addr)
// whenever given and required when --nnodes > 1.
StatusOr<DistSetup> resolve_dist_args(const DistArgs& a);

}  // namespace dsa::cli
