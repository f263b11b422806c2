// parse_config_args: CONFIG, repeated --set in both spellings, and a command's own flags.
#include "orchestrator/cli/cli_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/observe/log.h"

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

// Worker flags are integers only when all of their text is: garbage never becomes 0.
TEST(CliArgs, IntegerFlagsParseStrictly) {
  static constexpr FlagSpec kWorkerFlags[] = {{"--rank", true}};
  auto rank = [](const char* text) {
    Result<ConfigArgs> a = parse_config_args({"--rank", text}, kWorkerFlags);
    EXPECT_TRUE(a.ok());
    return a->integer("--rank", 0, 0, 7);
  };
  EXPECT_EQ(*rank("3"), 3);
  for (const char* bad : {"", "x", "3x", " 3", "-1", "8", "99999999999999999999"}) {
    Result<int64_t> r = rank(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(str("--rank `", bad, "` is not an integer from 0 to 7")));
  }
  Result<ConfigArgs> none = parse_config_args({}, kWorkerFlags);
  EXPECT_EQ(*none->integer("--rank", 5, 0, 7), 5);
}

TEST(CliArgs, AWorkerTakesItsConfigOnce) {
  static constexpr FlagSpec kWorkerFlags[] = {{"--config", true}};
  EXPECT_EQ(*parse_config_args({"--config", "a.yaml"}, kWorkerFlags)->worker_config_path(), "a.yaml");
  EXPECT_EQ(*parse_config_args({"a.yaml"}, kWorkerFlags)->worker_config_path(), "a.yaml");
  EXPECT_THAT(parse_config_args({"a.yaml", "--config", "b.yaml"}, kWorkerFlags)->worker_config_path().status().message(),
              HasSubstr("give the config once"));
  EXPECT_THAT(parse_config_args({}, kWorkerFlags)->worker_config_path().status().message(),
              HasSubstr("missing --config PATH"));
}

}  // namespace
}  // namespace rlrun::orchestrator
