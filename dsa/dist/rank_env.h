// Who this process is among the ranks the launcher started (launcher.h, docs/multi_gpu.md): the
// launcher puts DSA_RANK, DSA_LOCAL_RANK, DSA_LOCAL_WORLD_SIZE, DSA_WORLD_SIZE and DSA_NODE_RANK
// in each child's environment. A process that finds none of them is not a launched rank (it may
// become the launcher); one that finds some but not all, or a value that does not parse or does
// not fit the others, was started wrongly and must stop before it joins a collective.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "dsa/core/status.h"

namespace dsa::dist {

inline constexpr const char* kEnvRank = "DSA_RANK";
inline constexpr const char* kEnvLocalRank = "DSA_LOCAL_RANK";
inline constexpr const char* kEnvLocalWorldSize = "DSA_LOCAL_WORLD_SIZE";
inline constexpr const char* kEnvWorldSize = "DSA_WORLD_SIZE";
inline constexpr const char* kEnvNodeRank = "DSA_NODE_RANK";

struct RankEnvironment {
  int32_t rank = 0;              // global: node_rank * local_world_size + local_rank
  int32_t local_rank = 0;        // on this node; the GPU it takes (cudaSetDevice)
  int32_t local_world_size = 1;  // ranks on this node
  int32_t world_size = 1;        // ranks on all nodes: local_world_size * nodes
  int32_t node_rank = 0;

  bool operator==(const RankEnvironment&) const = default;
};

// Reads the variables through `get` (getenv's contract: nullptr when unset). nullopt when none is
// set; InvalidArgument naming the variable and its value when one is missing, not a decimal
// integer in range, or inconsistent with the others ("DSA_RANK = 5: must be DSA_NODE_RANK * ...").
using EnvLookup = std::function<const char*(const char*)>;
StatusOr<std::optional<RankEnvironment>> parse_rank_environment(const EnvLookup& get);

// The same on this process's environment.
StatusOr<std::optional<RankEnvironment>> rank_environment();

}  // namespace dsa::dist
