// The rank variables a launched process reads: none set is "not a launched rank"; a full,
// consistent set is parsed; a missing, malformed or inconsistent one is refused naming the
// variable and its value.
#include "dsa/dist/rank_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace dsa::dist {
namespace {

StatusOr<std::optional<RankEnvironment>> parse(const std::map<std::string, std::string>& vars) {
  return parse_rank_environment([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::map<std::string, std::string> rank5() {  // node 1's local rank 1 of 4, 2 nodes
  return {{kEnvRank, "5"},
          {kEnvLocalRank, "1"},
          {kEnvLocalWorldSize, "4"},
          {kEnvWorldSize, "8"},
          {kEnvNodeRank, "1"}};
}

TEST(RankEnvironment, NoneSetIsNotALaunchedRank) {
  auto e = parse({});
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->has_value());
}

TEST(RankEnvironment, ParsesAConsistentSet) {
  auto e = parse(rank5());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ(**e, (RankEnvironment{5, 1, 4, 8, 1}));
}

TEST(RankEnvironment, RefusesNamingTheVariableAndValue) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {kEnvRank, "", "DSA_RANK = '': must be a decimal integer"},
      {kEnvRank, "five", "DSA_RANK = 'five': must be a decimal integer"},
      {kEnvRank, "5 ", "DSA_RANK = '5 ': must be a decimal integer"},
      {kEnvRank, "+5", "DSA_RANK = '+5': must be a decimal integer"},
      {kEnvWorldSize, "99999999999", "DSA_WORLD_SIZE = '99999999999': must be a decimal integer"},
      {kEnvLocalWorldSize, "0", "DSA_LOCAL_WORLD_SIZE = 0: must be >= 1"},
      {kEnvWorldSize, "6", "DSA_WORLD_SIZE = 6: must be a multiple of DSA_LOCAL_WORLD_SIZE = 4"},
      {kEnvWorldSize, "2", "DSA_WORLD_SIZE = 2: must be a multiple of DSA_LOCAL_WORLD_SIZE = 4"},
      {kEnvNodeRank, "2", "DSA_NODE_RANK = 2: must be in [0, 2)"},
      {kEnvNodeRank, "-1", "DSA_NODE_RANK = -1: must be in [0, 2)"},
      {kEnvLocalRank, "4", "DSA_LOCAL_RANK = 4: must be in [0, DSA_LOCAL_WORLD_SIZE = 4)"},
      {kEnvRank, "4",
       "DSA_RANK = 4: must be DSA_NODE_RANK * DSA_LOCAL_WORLD_SIZE + DSA_LOCAL_RANK = 5"},
  };
  for (const auto& [name, value, want] : cases) {
    auto vars = rank5();
    vars[name] = value;
    auto e = parse(vars);
    ASSERT_FALSE(e.ok()) << name << " = " << value;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(want), std::string::npos) << e.status().to_string();
  }
}

TEST(RankEnvironment, RefusesAPartialSetNamingTheMissingVariable) {
  for (const char* missing :
       {kEnvRank, kEnvLocalRank, kEnvLocalWorldSize, kEnvWorldSize, kEnvNodeRank}) {
    auto vars = rank5();
    vars.erase(missing);
    auto e = parse(vars);
    ASSERT_FALSE(e.ok()) << missing;
    EXPECT_NE(e.status().message().find(std::string(missing) + " is not set, but 4 other"),
              std::string::npos)
        << e.status().to_string();
  }
}

}  // namespace
}  // namespace dsa::dist
