// load_config: layering, strict keys and values, every error reported with file:line.
#include "common/config/config.h"

#include <filesystem>

#include "common/observe/log.h"
#include "tests/common/config_test_util.h"

namespace rlrun {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using rlrun::testing::error_lines;
using rlrun::testing::load_text;
using rlrun::testing::PassThroughCheckpointReader;
using rlrun::testing::TempDir;

TEST(ConfigLoad, EmptyFileGivesDefaults) {
  Result<Config> c = load_text("");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const Config d;
  EXPECT_EQ(c->inference_num_workers, d.inference_num_workers);
  EXPECT_EQ(c->max_off_policy_steps, -1);
  EXPECT_EQ(c->metrics_bind, "127.0.0.1:9400");
  EXPECT_EQ(c->algorithm, Algorithm::kGrpo);
  EXPECT_TRUE(*c == d);
  EXPECT_EQ(render_config(*c), render_config(d));
}

TEST(ConfigLoad, ReadsEveryTypeAndSection) {
  Result<Config> c = load_text(
      "group_size: 16\n"
      "temperature: 0.7\n"
      "enable_prompt_prefetch: false\n"
      "algorithm: dr_grpo\n"
      "placement: SPREAD\n"
      "log_level: debug\n"
      "run_dir: /tmp/somewhere\n"
      "learning_rate: 3e-4\n"
      "model:\n  hidden_size: 64\n  architecture: qwen2\n  qkv_bias: true\n"
      "task:\n  name: countdown\n  num_numbers: 5\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->group_size, 16);
  EXPECT_DOUBLE_EQ(c->temperature, 0.7);
  EXPECT_FALSE(c->enable_prompt_prefetch);
  EXPECT_EQ(c->algorithm, Algorithm::kDrGrpo);
  EXPECT_EQ(c->placement, Placement::kSpread);
  EXPECT_EQ(c->log_level, log::Level::kDebug);
  EXPECT_EQ(c->run_dir, "/tmp/somewhere");
  EXPECT_DOUBLE_EQ(c->learning_rate, 3e-4);
  EXPECT_EQ(c->model.hidden_size, 64);
  EXPECT_EQ(c->model.architecture, Architecture::kQwen2);
  EXPECT_EQ(c->task.name, TaskName::kCountdown);
  EXPECT_EQ(c->task.num_numbers, 5);
}

TEST(ConfigLoad, LayersDefaultsThenFileThenSet) {
  TempDir dir;
  const std::string path = dir.write("run.yaml", "seed: 5\ngroup_size: 4\nmodel:\n  num_layers: 3\n");
  Result<Config> c = load_config(path, {"group_size=6", "model.num_layers=2", "group_size=12"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->seed, 5);              // file over default
  EXPECT_EQ(c->group_size, 12);       // --set over file; the last --set wins
  EXPECT_EQ(c->model.num_layers, 2);  // dotted --set reaches a section
  EXPECT_EQ(c->top_p, Config{}.top_p);
}

TEST(ConfigLoad, SetValuesAreYaml) {
  Result<Config> c = load_text("", {"run_dir=\"a b\"", "model.tokenizer=", "use_tis=true",
                                    "ppo_clip_ref_logprobs=batch", "temperature=0"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->run_dir, (std::filesystem::current_path() / "a b").string());  // a --set path: cwd
  EXPECT_EQ(c->model.tokenizer, "");
  EXPECT_TRUE(c->use_tis);
  EXPECT_DOUBLE_EQ(c->temperature, 0.0);
}

TEST(ConfigLoad, UnknownKeySuggestsTheCloseOneWithFileAndLine) {
  EXPECT_THAT(error_lines(load_text("seed: 1\nmax_async_rollot: 2\n")),
              ElementsAre("run.yaml:2: unknown key `max_async_rollot` (did you mean "
                          "`max_async_rollout`?)"));
}

TEST(ConfigLoad, UnknownKeyFarFromEveryKeyHasNoSuggestion) {
  EXPECT_THAT(error_lines(load_text("banana_split: 2\n")),
              ElementsAre("run.yaml:1: unknown key `banana_split`"));
}

TEST(ConfigLoad, UnknownKeyInASectionSuggestsWithinIt) {
  EXPECT_THAT(error_lines(load_text("model:\n  hiden_size: 64\n")),
              ElementsAre("run.yaml:2: unknown key `hiden_size` (did you mean `hidden_size`?)"));
}

TEST(ConfigLoad, KeyInTheWrongSectionPointsToItsSection) {
  EXPECT_THAT(error_lines(load_text("hidden_size: 64\n")),
              ElementsAre(HasSubstr("run.yaml:1: unknown key `hidden_size` (did you mean "
                                    "`model.hidden_size`?)")));
  EXPECT_THAT(error_lines(load_text("task:\n  seq_len: 64\n")),
              ElementsAre(HasSubstr("did you mean top-level `seq_len`?")));
}

TEST(ConfigLoad, WrongTypesNameKeyAndValue) {
  EXPECT_THAT(error_lines(load_text("group_size: abc\n")),
              ElementsAre("run.yaml:1: `group_size` expects an integer, got `abc`"));
  EXPECT_THAT(error_lines(load_text("group_size: 2.5\n")),
              ElementsAre(HasSubstr("`group_size` expects an integer, got `2.5`")));
  EXPECT_THAT(error_lines(load_text("temperature: hot\n")),
              ElementsAre(HasSubstr("`temperature` expects a number, got `hot`")));
  EXPECT_THAT(error_lines(load_text("use_tis: yes\n")),
              ElementsAre(HasSubstr("`use_tis` expects true or false, got `yes`")));
  EXPECT_THAT(error_lines(load_text("seq_len: [1, 2]\n")),
              ElementsAre(HasSubstr("`seq_len` expects an integer, got a list")));
  EXPECT_THAT(error_lines(load_text("run_dir:\n")),
              ElementsAre(HasSubstr("`run_dir` expects a string")));
}

TEST(ConfigLoad, OutOfRangeNamesTheAllowedRange) {
  EXPECT_THAT(error_lines(load_text("gpu_memory_utilization: 1.5\n")),
              ElementsAre("run.yaml:1: `gpu_memory_utilization` = 1.5 is out of range: allowed "
                          "(0, 1]"));
  EXPECT_THAT(error_lines(load_text("gpu_memory_utilization: 0\n")),
              ElementsAre(HasSubstr("allowed (0, 1]")));
  EXPECT_THAT(error_lines(load_text("max_off_policy_steps: -2\n")),
              ElementsAre(HasSubstr("`max_off_policy_steps` = -2 is out of range: allowed "
                                    "[-1, 1048576]")));
  EXPECT_THAT(error_lines(load_text("min_lr_ratio: 1.2\n")),
              ElementsAre(HasSubstr("`min_lr_ratio` = 1.2 is out of range: allowed [0, 1]")));
  EXPECT_THAT(error_lines(load_text("seed: 99999999999999999999999\n")),
              ElementsAre(HasSubstr("`seed` = 99999999999999999999999 is out of range")));
  EXPECT_THAT(error_lines(load_text("temperature: .nan\n")),
              ElementsAre(HasSubstr("`temperature` expects a number")));
}

TEST(ConfigLoad, BadEnumListsTheValuesAndSuggests) {
  EXPECT_THAT(error_lines(load_text("lr_scheduler: cosin\n")),
              ElementsAre("run.yaml:1: `lr_scheduler` = `cosin` is not one of: none, constant, "
                          "linear, cosine (did you mean `cosine`?)"));
  EXPECT_THAT(error_lines(load_text("placement: pack\n")),
              ElementsAre(HasSubstr("did you mean `PACK`?")));
}

TEST(ConfigLoad, DuplicateKeyIsAnError) {
  EXPECT_THAT(error_lines(load_text("seed: 1\ngroup_size: 4\nseed: 2\n")),
              ElementsAre("run.yaml:3: `seed` is given twice (first at line 1)"));
  EXPECT_THAT(error_lines(load_text("model:\n  num_layers: 1\n  num_layers: 2\n")),
              ElementsAre(HasSubstr("run.yaml:3: `model.num_layers` is given twice")));
}

TEST(ConfigLoad, YamlSyntaxErrorHasFileAndLine) {
  std::vector<std::string> lines = error_lines(load_text("seed: 1\ngroup_size: [4\nx: 1\n"));
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0], AllOf(::testing::StartsWith("run.yaml:"), HasSubstr("YAML syntax error")));
  EXPECT_THAT(error_lines(load_text("a: 1\n b: 2\n")),
              ElementsAre(::testing::StartsWith("run.yaml:2:3: YAML syntax error")));
  EXPECT_THAT(error_lines(load_text("- 1\n- 2\n")),
              ElementsAre(HasSubstr("a config file is a mapping")));
  EXPECT_THAT(error_lines(load_text("seed: 1\n---\nseed: 2\n")),
              ElementsAre(HasSubstr("run.yaml:3: a config file holds one YAML document")));
  EXPECT_THAT(error_lines(load_text("? [a]\n: 1\n")), ElementsAre(HasSubstr("plain name")));
  EXPECT_THAT(error_lines(load_text(std::string(100000, '['))),
              ElementsAre(HasSubstr("YAML syntax error")));  // deep nesting: an error, no crash
  EXPECT_THAT(error_lines(load_text("model: 3\n")),
              ElementsAre(HasSubstr("run.yaml:1: `model` must be a mapping")));
}

TEST(ConfigLoad, UnknownSetKeyNamesSetAndSuggests) {
  EXPECT_THAT(error_lines(load_text("", {"max_async_rollot=2"})),
              ElementsAre("--set max_async_rollot=2: unknown key `max_async_rollot` (did you mean "
                          "`max_async_rollout`?)"));
  EXPECT_THAT(error_lines(load_text("", {"modle.num_layers=2"})),
              ElementsAre(HasSubstr("(did you mean `model.num_layers`?)")));
  EXPECT_THAT(error_lines(load_text("", {"hidden_size=64"})),
              ElementsAre(HasSubstr("(did you mean `model.hidden_size`?)")));
  EXPECT_THAT(error_lines(load_text("", {"seed"})),
              ElementsAre(HasSubstr("--set seed: expected key=value")));
  EXPECT_THAT(error_lines(load_text("", {"model={hidden_size: 3}"})),
              ElementsAre(HasSubstr("`model` is a section")));
  EXPECT_THAT(error_lines(load_text("", {"seq_len=[1"})),
              ElementsAre(HasSubstr("--set seq_len=[1: `[1` is not a YAML value")));
}

TEST(ConfigLoad, MissingFileIsClear) {
  TempDir dir;
  Result<Config> c = load_config(dir.path() + "/nope.yaml", {});
  EXPECT_THAT(error_lines(c), ElementsAre(dir.path() + "/nope.yaml: config file does not exist"));
  EXPECT_THAT(error_lines(load_config(dir.path(), {})), ElementsAre(HasSubstr("is a folder")));
}

TEST(ConfigLoad, MissingFileStillReportsBadSetKeys) {
  Result<Config> c = load_config("/nonexistent/run.yaml", {"sed=1"});
  EXPECT_THAT(error_lines(c), ElementsAre(HasSubstr("does not exist"),
                                          HasSubstr("--set sed=1: unknown key `sed`")));
}

TEST(ConfigLoad, ReportsEveryErrorNotJustTheFirst) {
  std::vector<std::string> lines = error_lines(load_text(
      "max_async_rollot: 2\n"
      "group_size: abc\n"
      "top_p: 2\n"
      "inference_num_workers: 3\n"
      "inference_tensor_parallel_size: 2\n"
      "model:\n  num_heads: 3\n",
      {"sed=4"}));
  EXPECT_THAT(lines, ::testing::UnorderedElementsAre(
                         HasSubstr("run.yaml:1: unknown key `max_async_rollot`"),
                         HasSubstr("run.yaml:2: `group_size` expects an integer"),
                         HasSubstr("run.yaml:3: `top_p` = 2 is out of range"),
                         HasSubstr("run.yaml:4: `inference_num_workers` (3) is not divisible"),
                         HasSubstr("run.yaml:7: `model.hidden_size` (256) is not divisible by "
                                   "`model.num_heads` (3)"),
                         HasSubstr("run.yaml:7: `model.num_heads` (3) is not divisible by "
                                   "`model.num_kv_heads` (4)"),
                         HasSubstr("--set sed=4: unknown key `sed` (did you mean `seed`?)")));
}

TEST(ConfigLoad, ASetFixesABadFileValueButTheFileErrorStays) {
  // The file is wrong even when --set overrides the key: the error must not be hidden.
  EXPECT_THAT(error_lines(load_text("group_size: abc\n", {"group_size=4"})),
              ElementsAre(HasSubstr("run.yaml:1: `group_size` expects an integer")));
}

TEST(ConfigLoad, RenderedConfigLoadsBackEqual) {
  Result<Config> c = load_text(
      "temperature: 0.123456789\nlearning_rate: 1.5e-7\nrun_dir: \"we\\\"ird\\\\path\"\n"
      "algorithm: gspo\nmodel:\n  tokenizer: ''\n",
      {"seed=77"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  const std::string yaml = render_config(*c);
  Result<Config> again = load_text(yaml);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(render_config(*again), yaml);
  EXPECT_TRUE(*again == *c);
  EXPECT_FALSE(*again == Config{});
  EXPECT_DOUBLE_EQ(again->temperature, 0.123456789);
  EXPECT_DOUBLE_EQ(again->learning_rate, 1.5e-7);
  EXPECT_EQ(again->run_dir, (std::filesystem::current_path() / "we\"ird\\path").string());
  EXPECT_EQ(again->seed, 77);
}


// Paths written in a config file are relative to that file, wherever rlrun runs; --set paths are
// relative to the working directory. Both come back absolute, so the effective config means the
// same when a worker reads it from inside the run folder.
TEST(ConfigPaths, RelativeToTheConfigFileAndSetToTheWorkingDirectory) {
  TempDir dir;
  const std::string data = dir.write("project/data/train.jsonl", "{\"prompt\": \"1+1\", \"answer\": \"2\"}\n");
  const std::string tok = dir.write("project/tok.json", "{}");
  const std::string config = dir.write("project/configs/run.yaml",
                                       "run_dir: ../runs/a\n"
                                       "model:\n  tokenizer: ../tok.json\n"
                                       "task:\n  name: jsonl\n  dataset: ../data/train.jsonl\n");
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());  // not the config's folder
  Result<Config> c = load_config(config, {});
  Result<Config> set = load_config(config, {"task.eval_dataset=project/data/train.jsonl"});
  std::filesystem::current_path(before);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->run_dir, dir.path() + "/project/runs/a");
  EXPECT_EQ(c->model.tokenizer, tok);
  EXPECT_EQ(c->task.dataset, data);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->task.eval_dataset, data);
  EXPECT_EQ(Config{}.run_dir, "runs/rlrun") << "a default is not rewritten";
}

TEST(ConfigPaths, AMissingFileIsNamedWithWhereItWasLookedFor) {
  TempDir dir;
  const std::string config = dir.write("configs/run.yaml", "task:\n  name: jsonl\n  dataset: data.jsonl\n");
  EXPECT_THAT(error_lines(load_config(config, {})),
              ElementsAre(AllOf(HasSubstr("run.yaml:3"), HasSubstr(dir.path() + "/configs/data.jsonl"),
                                HasSubstr("relative to that file's folder"))));
}

// The effective config (validate prints it, a run folder holds it) loads back to the same Config,
// also with model.checkpoint, whose shape keys it may not repeat.
TEST(EffectiveConfig, ReadsBackWithACheckpoint) {
  PassThroughCheckpointReader reader;
  TempDir dir;
  dir.write("model/config.json",
            R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512})");
  const std::string config = dir.write("run.yaml", "model:\n  checkpoint: model\n");
  Result<Config> c = load_config(config, {});
  ASSERT_TRUE(c.ok()) << c.status().message();
  Result<std::string> effective = render_effective_config(*c);
  ASSERT_TRUE(effective.ok()) << effective.status().message();
  EXPECT_THAT(*effective, HasSubstr("# hidden_size: 64"));
  const std::string written = dir.write("run/config.yaml", *effective);
  Result<Config> again = load_config(written, {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->model.hidden_size, 64);
  EXPECT_EQ(again->model.checkpoint, dir.path() + "/model");
  Result<std::string> effective_again = render_effective_config(*again);
  ASSERT_TRUE(effective_again.ok()) << effective_again.status().message();
  EXPECT_EQ(*effective_again, *effective);
}

// A model.checkpoint that is a file goes to the registered CheckpointReader (rlrun registers
// the engine's reader), whose config.json text gives the shape; the file is the tokenizer.
Result<std::string> fake_gguf_reader(const std::string& path) {
  if (path.ends_with("broken.gguf")) return invalid_argument(str(path, ": not a GGUF file"));
  return std::string(R"({"model_type": "llama", "hidden_size": 96, "num_hidden_layers": 3,
      "num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000,
      "tie_word_embeddings": true})");
}

TEST(CheckpointFile, ReadsTheShapeThroughTheRegisteredReader) {
  TempDir dir;
  const std::string gguf = dir.write("m.gguf", "bytes the fake reader ignores");
  const std::string config = dir.write("run.yaml", "model:\n  checkpoint: m.gguf\n");
  set_checkpoint_reader(nullptr);
  EXPECT_THAT(error_lines(load_config(config, {})),
              ElementsAre(AllOf(HasSubstr("this program reads no checkpoints"))));
  set_checkpoint_reader(&fake_gguf_reader);
  Result<Config> c = load_config(config, {});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.hidden_size, 96);
  EXPECT_EQ(c->model.num_layers, 3);
  EXPECT_EQ(c->model.num_kv_heads, 2);
  EXPECT_TRUE(c->model.tie_embeddings);
  EXPECT_EQ(c->model.tokenizer, gguf);
  const std::string broken = dir.write("broken.gguf", "");
  EXPECT_THAT(error_lines(load_config(config, {str("model.checkpoint=", broken)})),
              ElementsAre(HasSubstr("`model.checkpoint`: " + broken + ": not a GGUF file")));
  set_checkpoint_reader(nullptr);
}

}  // namespace
}  // namespace rlrun
