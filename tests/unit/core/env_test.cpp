// core/env.h: the knob parsing every A/B switch shares.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace pg {
namespace {

constexpr const char* kName = "PEREGRINE_TEST_ENV_KNOB";

TEST(Env, FlagIsFallbackWhenUnsetOrEmptyZeroIsFalseAnythingElseTrue) {
  unsetenv(kName);
  EXPECT_TRUE(EnvFlag(kName, true));
  EXPECT_FALSE(EnvFlag(kName, false));
  setenv(kName, "", 1);
  EXPECT_TRUE(EnvFlag(kName, true));
  setenv(kName, "0", 1);
  EXPECT_FALSE(EnvFlag(kName, true));
  setenv(kName, "1", 1);
  EXPECT_TRUE(EnvFlag(kName, false));
  setenv(kName, "01", 1);  // not the string "0"
  EXPECT_TRUE(EnvFlag(kName, false));
  unsetenv(kName);
}

TEST(Env, IntIsFallbackWhenUnsetOrEmpty) {
  unsetenv(kName);
  EXPECT_EQ(EnvInt(kName, -2), -2);
  setenv(kName, "", 1);
  EXPECT_EQ(EnvInt(kName, 7), 7);
  setenv(kName, "64", 1);
  EXPECT_EQ(EnvInt(kName, 7), 64);
  setenv(kName, "-1", 1);
  EXPECT_EQ(EnvInt(kName, 7), -1);
  unsetenv(kName);
}

}  // namespace
}  // namespace pg
