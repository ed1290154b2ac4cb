#include "dsa/core/env_switch.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace dsa {
namespace {

constexpr const char* kName = "DSA_ENV_SWITCH_TEST";

TEST(EnvChoice, UnsetNamedAndBadValues) {
  unsetenv(kName);
  StatusOr<std::string_view> v = env_choice(kName, {"wave", "fill"}, "wave");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, "wave");
  v = env_choice(kName, {"1", "2"}, "auto");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "auto");

  setenv(kName, "fill", 1);
  v = env_choice(kName, {"wave", "fill"}, "wave");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "fill");

  // Not a prefix match, not case-folded, not empty.
  for (const char* bad : {"fil", "FILL", "fill ", ""}) {
    setenv(kName, bad, 1);
    v = env_choice(kName, {"wave", "fill"}, "wave");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    const std::string m = v.status().message();
    EXPECT_NE(m.find(std::string(kName) + " = " + bad + ": must be one of wave, fill"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("(or unset: wave)"), std::string::npos) << m;
  }
  setenv(kName, "3", 1);
  v = env_choice(kName, {"1", "2"}, "auto");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("3: must be one of 1, 2 (or unset: auto)"), std::string::npos)
      << v.status().to_string();
  unsetenv(kName);
}

}  // namespace
}  // namespace dsa
