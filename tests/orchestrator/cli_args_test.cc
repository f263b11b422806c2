// parse_config_args: CONFIG, repeated --set in both spellings, and a command's own flags.
#include "orchestrator/cli_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr FlagSpec kFlags[] = {{"--dry-run", false}, {"--out", true}};

TEST(CliArgs, ConfigAndRepeatedSetInBothSpellings) {
  Result<ConfigArgs> a = parse_config_args(
      {"run.yaml", "--set", "seed=1", "--set=model.hidden_size=64", "--set", "run_dir=a=b"}, kFlags);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->config_path, "run.yaml");
  EXPECT_THAT(a->overrides, ElementsAre("seed=1", "model.hidden_size=64", "run_dir=a=b"));
  EXPECT_TRUE(a->flags.empty());
}

TEST(CliArgs, FlagsAnywhereWithOrWithoutValues) {
  Result<ConfigArgs> a =
      parse_config_args({"--dry-run", "--out", "dir1", "run.yaml", "--set", "seed=2"}, kFlags);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(a->has("--dry-run"));
  EXPECT_EQ(a->value("--out"), "dir1");
  EXPECT_EQ(a->config_path, "run.yaml");
  Result<ConfigArgs> b = parse_config_args({"--out=dir2"}, kFlags);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->value("--out"), "dir2");
  EXPECT_FALSE(b->has("--dry-run"));
  EXPECT_EQ(b->value("--dry-run", "fallback"), "fallback");
  EXPECT_EQ(b->config_path, "");
}

TEST(CliArgs, MistakesAreReported) {
  EXPECT_THAT(parse_config_args({"a.yaml", "b.yaml"}).status().message(),
              HasSubstr("unexpected argument `b.yaml`"));
  EXPECT_THAT(parse_config_args({"a.yaml", "--bogus"}).status().message(),
              HasSubstr("unknown flag `--bogus`"));
  EXPECT_THAT(parse_config_args({"a.yaml", "--set"}).status().message(),
              HasSubstr("`--set` needs a value"));
  EXPECT_THAT(parse_config_args({"a.yaml", "--set", "seed"}).status().message(),
              HasSubstr("expected key=value"));
  EXPECT_THAT(parse_config_args({"--out"}, kFlags).status().message(),
              HasSubstr("`--out` needs a value"));
  EXPECT_THAT(parse_config_args({"--dry-run=yes"}, kFlags).status().message(),
              HasSubstr("takes no value"));
}

}  // namespace
}  // namespace rlrun::orchestrator
