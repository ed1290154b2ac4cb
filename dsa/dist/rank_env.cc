#include "dsa/dist/rank_env.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <string_view>

namespace dsa::dist {

namespace {

StatusOr<int32_t> parse_int(const char* name, std::string_view text) {
  int32_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) {
    return invalid_argument(
        fmt::format("{} = '{}': must be a decimal integer (set by the launcher)", name, text));
  }
  return v;
}

Status check(bool ok, const char* name, int32_t v, std::string_view rule) {
  if (ok) return ok_status();
  return invalid_argument(fmt::format("{} = {}: {}", name, v, rule));
}

}  // namespace

StatusOr<std::optional<RankEnvironment>> parse_rank_environment(const EnvLookup& get) {
  const std::array<const char*, 5> names = {kEnvRank, kEnvLocalRank, kEnvLocalWorldSize,
                                            kEnvWorldSize, kEnvNodeRank};
  std::array<const char*, 5> values{};
  int num_set = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    values[i] = get(names[i]);
    num_set += values[i] != nullptr;
  }
  if (num_set == 0) return std::optional<RankEnvironment>();
  std::array<int32_t, 5> v{};
  for (size_t i = 0; i < names.size(); ++i) {
    if (values[i] == nullptr) {
      return invalid_argument(fmt::format(
          "{} is not set, but {} other DSA_* rank variables are: a launched rank needs all of {}, "
          "{}, {}, {} and {}",
          names[i], num_set, names[0], names[1], names[2], names[3], names[4]));
    }
    DSA_ASSIGN_OR_RETURN(v[i], parse_int(names[i], values[i]));
  }
  RankEnvironment e{v[0], v[1], v[2], v[3], v[4]};
  // The order matters: each rule may use only the values the earlier ones proved sane.
  DSA_RETURN_IF_ERROR(
      check(e.local_world_size >= 1, kEnvLocalWorldSize, e.local_world_size, "must be >= 1"));
  DSA_RETURN_IF_ERROR(
      check(e.world_size >= e.local_world_size && e.world_size % e.local_world_size == 0,
            kEnvWorldSize, e.world_size,
            fmt::format("must be a multiple of {} = {} (the same ranks per node)",
                        kEnvLocalWorldSize, e.local_world_size)));
  const int32_t nodes = e.world_size / e.local_world_size;
  DSA_RETURN_IF_ERROR(check(e.node_rank >= 0 && e.node_rank < nodes, kEnvNodeRank, e.node_rank,
                            fmt::format("must be in [0, {}) ({} nodes)", nodes, nodes)));
  DSA_RETURN_IF_ERROR(
      check(e.local_rank >= 0 && e.local_rank < e.local_world_size, kEnvLocalRank, e.local_rank,
            fmt::format("must be in [0, {} = {})", kEnvLocalWorldSize, e.local_world_size)));
  const int64_t expected = int64_t(e.node_rank) * e.local_world_size + e.local_rank;
  DSA_RETURN_IF_ERROR(check(
      e.rank == expected, kEnvRank, e.rank,
      fmt::format("must be {} * {} + {} = {} ({} * {} + {})", kEnvNodeRank, kEnvLocalWorldSize,
                  kEnvLocalRank, expected, e.node_rank, e.local_world_size, e.local_rank)));
  return std::optional<RankEnvironment>(e);
}

StatusOr<std::optional<RankEnvironment>> rank_environment() {
  return parse_rank_environment([](const char* name) { return std::getenv(name); });
}

}  // namespace dsa::dist
