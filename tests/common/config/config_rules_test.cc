// Cross-field rules and model.checkpoint: each message names every key involved.
#include "common/config/config.h"

#include "tests/common/config_test_util.h"

namespace rlrun {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using rlrun::testing::error_lines;
using rlrun::testing::load_text;
using rlrun::testing::PassThroughCheckpointReader;
using rlrun::testing::TempDir;

TEST(ConfigRules, DefaultsPassEveryRule) {
  Result<Config> c = load_text("");
  EXPECT_TRUE(c.ok()) << c.status().message();
}

// task.reward is a weighted sum of terms; a term that needs a key names it, and a key no term
// reads is refused.
TEST(ConfigRules, RewardExpressionAndTheKeysItsTermsNeed) {
  EXPECT_TRUE(load_text("task:\n  reward: numeric + 0.1*format\n  format_regex: '####'\n").ok());
  EXPECT_THAT(error_lines(load_text("task:\n  reward: numerik\n")),
              ElementsAre(AllOf(HasSubstr("run.yaml:2:"), HasSubstr("unknown term `numerik`"))));
  EXPECT_THAT(error_lines(load_text("task:\n  reward: http\n")),
              ElementsAre(HasSubstr("task.reward uses the term `http`, which needs `task.reward_url`")));
  EXPECT_THAT(error_lines(load_text("task:\n  reward: regex\n")),
              ElementsAre(HasSubstr("which needs `task.reward_regex`")));
  EXPECT_THAT(error_lines(load_text("task:\n  reward_url: http://x/\n")),
              ElementsAre(HasSubstr("`task.reward_url` is only read by the term `http`")));
  EXPECT_THAT(error_lines(load_text("task:\n  reward: http\n  reward_url: ftp://x/\n")),
              ElementsAre(HasSubstr("is not an http:// or https:// URL")));
  EXPECT_THAT(error_lines(load_text("task:\n  operations: '+/'\n")),
              ElementsAre(HasSubstr("`task.operations` \"+/\" must be one or more of + - *")));
  EXPECT_THAT(error_lines(load_text("task:\n  question_format: 'What is {a}?'\n")),
              ElementsAre(HasSubstr("must contain {a} and {b}")));
}

// LoRA runs on the CPU backend with the KL reference on the trainer; the refusals name the keys.
TEST(ConfigRules, LoraRefusesWhatIsNotImplementedNamingTheKeys) {
  EXPECT_TRUE(load_text("lora_rank: 8\nlora_alpha: 16\nlora_target_modules: q_proj,v_proj\nkl_coef: 0.1\n").ok());
  EXPECT_THAT(error_lines(load_text("lora_rank: 8\nbackend: cuda\n")),
              ElementsAre(AllOf(HasSubstr("run.yaml:1:"), HasSubstr("`lora_rank` > 0 needs `backend: cpu`"))));
  EXPECT_THAT(error_lines(load_text("lora_rank: 8\nkl_coef: 0.1\nkl_reference_on: rollout\n")),
              ElementsAre(HasSubstr("`lora_rank` > 0 with `kl_reference_on: rollout` is not implemented")));
  EXPECT_THAT(error_lines(load_text("lora_rank: 4\nlora_target_modules: ''\n")),
              ElementsAre(HasSubstr("`lora_target_modules` is empty")));
  EXPECT_FALSE(load_text("lora_alpha: 0\n").ok());
  EXPECT_TRUE(load_text("backend: cuda\nlora_target_modules: ''\n").ok()) << "lora_rank 0: the LoRA keys are unread";
}

// base_weights_dtype: bf16 is the CPU backend's storage; cuda keeps bf16 compute weights already.
TEST(ConfigRules, Bf16BaseWeightsAreRefusedWithBackendCudaNamingTheKey) {
  EXPECT_TRUE(load_text("base_weights_dtype: bf16\nlora_rank: 8\n").ok());
  EXPECT_TRUE(load_text("backend: cuda\nbase_weights_dtype: fp32\n").ok());
  EXPECT_THAT(error_lines(load_text("base_weights_dtype: bf16\nbackend: cuda\n")),
              ElementsAre(AllOf(HasSubstr("run.yaml:1:"), HasSubstr("`base_weights_dtype: bf16` is for backend cpu"))));
  EXPECT_FALSE(load_text("base_weights_dtype: fp16\n").ok());
}

TEST(ConfigRules, InferenceWorkersDivisibleByTensorParallel) {
  EXPECT_THAT(error_lines(load_text("inference_num_workers: 6\n",
                                    {"inference_tensor_parallel_size=4"})),
              ElementsAre(AllOf(HasSubstr("run.yaml:1:"),
                                HasSubstr("`inference_num_workers` (6) is not divisible by "
                                          "`inference_tensor_parallel_size` (4)"))));
  EXPECT_TRUE(load_text("inference_num_workers: 8\ninference_tensor_parallel_size: 4\n").ok());
}

TEST(ConfigRules, RuleIsReportedWhereTheUserSetAKey) {
  EXPECT_THAT(error_lines(load_text("", {"inference_tensor_parallel_size=2"})),
              ElementsAre(HasSubstr("--set inference_tensor_parallel_size=2: "
                                    "`inference_num_workers` (1) is not divisible")));
}

TEST(ConfigRules, TisWithRolloutReferenceCountsTwice) {
  EXPECT_THAT(error_lines(load_text("use_tis: true\n")),
              ElementsAre("run.yaml:1: `use_tis: true` with `ppo_clip_ref_logprobs: rollout` "
                          "counts the importance correction twice; use ppo_clip_ref_logprobs: "
                          "batch or use_tis: false"));
  EXPECT_TRUE(load_text("use_tis: true\nppo_clip_ref_logprobs: batch\n").ok());
}

TEST(ConfigRules, ModelHeadsDivide) {
  EXPECT_THAT(error_lines(load_text("model:\n  num_heads: 4\n  num_kv_heads: 3\n")),
              ElementsAre(HasSubstr("run.yaml:2: `model.num_heads` (4) is not divisible by "
                                    "`model.num_kv_heads` (3)")));
  EXPECT_THAT(error_lines(load_text("model:\n  hidden_size: 100\n  num_heads: 8\n"
                                    "  num_kv_heads: 8\n")),
              ElementsAre(HasSubstr("`model.hidden_size` (100) is not divisible by "
                                    "`model.num_heads` (8)")));
  EXPECT_THAT(error_lines(load_text("model:\n  hidden_size: 12\n  num_heads: 4\n")),
              ElementsAre(HasSubstr("head size must be even")));
}

TEST(ConfigRules, SeqLenMultipleOfPadding) {
  EXPECT_THAT(error_lines(load_text("seq_len: 1000\n")),
              ElementsAre("run.yaml:1: `seq_len` (1000) is not a multiple of `pad_to_multiple_of` "
                          "(16)"));
}

TEST(ConfigRules, SequenceMustFitModelLenAndRow) {
  EXPECT_THAT(error_lines(load_text("max_tokens: 500\n")),
              ElementsAre(HasSubstr("`max_prompt_tokens` + `max_tokens` (128 + 500 = 628) exceeds "
                                    "`max_model_len` (512)")));
  EXPECT_THAT(error_lines(load_text("seq_len: 128\n")),
              ElementsAre(HasSubstr("exceeds `seq_len` (128)")));
  EXPECT_THAT(error_lines(load_text("max_model_len: 4096\n")),
              ElementsAre(HasSubstr("`max_model_len` (4096) exceeds `model.max_position` (2048)")));
}

TEST(ConfigRules, ClipRanges) {
  EXPECT_THAT(error_lines(load_text("clip_low: 1.0\n")),
              ElementsAre(HasSubstr("`clip_low` = 1.0 is out of range: allowed [0, 1)")));
  EXPECT_THAT(error_lines(load_text("clip_high: -0.1\n")),
              ElementsAre(HasSubstr("`clip_high` = -0.1 is out of range")));
  EXPECT_THAT(error_lines(load_text("clip_ratio_c: 0.5\n")),
              ElementsAre(HasSubstr("`clip_ratio_c` = 0.5 must be > 1")));
  EXPECT_TRUE(load_text("clip_ratio_c: 3\n").ok());
}

TEST(ConfigRules, AReferenceKeyRlrunDoesNotTakeSaysWhy) {
  EXPECT_THAT(error_lines(load_text("free_lane_after_generation: true\n")),
              ElementsAre(AllOf(HasSubstr("`free_lane_after_generation` is not an rlrun key"),
                                HasSubstr("scores a sample as it arrives"))));
  EXPECT_THAT(error_lines(load_text("weight_broadcast_pin_memory: true\n")),
              ElementsAre(HasSubstr("`weight_broadcast_pin_memory` is not an rlrun key")));
}

TEST(ConfigRules, MinibatchesDivideTheBatch) {
  EXPECT_THAT(error_lines(load_text("number_of_minibatches: 3\n")),
              ElementsAre(HasSubstr("`prompts_batch_size_for_trainer` (8) is not divisible by "
                                    "`number_of_minibatches` (3)")));
}

TEST(ConfigRules, ScheduleAndRuntime) {
  EXPECT_THAT(error_lines(load_text("number_of_steps: 10\nwarmup_steps: 20\n")),
              ElementsAre(HasSubstr("`warmup_steps` (20) exceeds the run's optimizer steps")));
  EXPECT_THAT(error_lines(load_text("lr_scheduler: none\nwarmup_steps: 5\n")),
              ElementsAre(HasSubstr("`warmup_steps` > 0 with `lr_scheduler: none`")));
  EXPECT_THAT(error_lines(load_text("heartbeat_timeout_seconds: 1\n")),
              ElementsAre(HasSubstr("`heartbeat_timeout_seconds` (1) must exceed "
                                    "`heartbeat_interval_seconds` (1)")));
}

TEST(ConfigRules, MetricsBind) {
  for (const char* ok : {"127.0.0.1:0", "0.0.0.0:9400", "localhost:65535", "[::1]:9400"}) {
    EXPECT_TRUE(load_text(std::string("metrics_bind: \"") + ok + "\"\n").ok()) << ok;
  }
  for (const char* bad : {"127.0.0.1", "127.0.0.1:70000", ":9400", "host:port", "::1:9400"}) {
    EXPECT_THAT(error_lines(load_text(std::string("metrics_bind: \"") + bad + "\"\n")),
                ElementsAre(HasSubstr("`metrics_bind` = `" + std::string(bad) + "` is not HOST:PORT")))
        << bad;
  }
}

TEST(ConfigRules, TaskDatasetRequiredExactlyForJsonl) {
  EXPECT_THAT(error_lines(load_text("task:\n  name: jsonl\n")),
              ElementsAre("run.yaml:2: `task.name: jsonl` needs `task.dataset`, the JSONL file of "
                          "prompts"));
  EXPECT_THAT(error_lines(load_text("task:\n  dataset: x.jsonl\n")),
              ElementsAre(HasSubstr("`task.dataset` is only read when `task.name` is jsonl"),
                          HasSubstr("x.jsonl` is not an existing file")));
  TempDir dir;
  const std::string data = dir.write("train.jsonl", "{\"prompt\": \"1+1\", \"answer\": \"2\"}\n");
  EXPECT_TRUE(load_text("task:\n  name: jsonl\n  dataset: " + data + "\n").ok());
  EXPECT_THAT(error_lines(load_text("task:\n  min_digits: 4\n  max_digits: 2\n")),
              ElementsAre(HasSubstr("`task.min_digits` (4) exceeds `task.max_digits` (2)")));
}

TEST(ConfigRules, Qwen2NeedsQkvBiasAndTokenizerMustExist) {
  EXPECT_THAT(error_lines(load_text("model:\n  architecture: qwen2\n")),
              ElementsAre(HasSubstr("set `model.qkv_bias: true`")));
  EXPECT_THAT(error_lines(load_text("model:\n  tokenizer: /no/tokenizer.json\n")),
              ElementsAre(HasSubstr("run.yaml:2: `model.tokenizer` = `/no/tokenizer.json` is not "
                                    "an existing file")));
}

TEST(ConfigRules, CudaBackendIsAllowedWithoutAGpu) {
  EXPECT_TRUE(load_text("backend: cuda\ninference_num_workers: 8\n"
                        "inference_tensor_parallel_size: 2\n").ok());
}

TEST(ConfigRules, RulesAboutARejectedValueAreSkipped) {
  // `seq_len: abc` is the error; "1024 is not a multiple" about the default would mislead.
  EXPECT_THAT(error_lines(load_text("seq_len: abc\npad_to_multiple_of: 1000\n")),
              ElementsAre(HasSubstr("`seq_len` expects an integer")));
}

// ---------------------------------------------------------------- model.checkpoint
constexpr char kHfConfig[] = R"({
  "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
  "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
  "vocab_size": 49152, "rope_theta": 100000.0, "rms_norm_eps": 1e-05,
  "tie_word_embeddings": true, "max_position_embeddings": 8192
})";

TEST(ConfigCheckpoint, ShapeComesFromConfigJson) {
  PassThroughCheckpointReader reader;
  TempDir dir;
  dir.write("ckpt/config.json", kHfConfig);
  dir.write("ckpt/tokenizer.json", "{}");
  Result<Config> c = load_text("model:\n  checkpoint: " + dir.path() + "/ckpt\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.hidden_size, 576);
  EXPECT_EQ(c->model.num_layers, 30);
  EXPECT_EQ(c->model.num_heads, 9);
  EXPECT_EQ(c->model.num_kv_heads, 3);
  EXPECT_EQ(c->model.intermediate_size, 1536);
  EXPECT_EQ(c->model.vocab_size, 49152);
  EXPECT_DOUBLE_EQ(c->model.rope_theta, 100000.0);
  EXPECT_DOUBLE_EQ(c->model.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c->model.tie_embeddings);
  EXPECT_FALSE(c->model.qkv_bias);
  EXPECT_EQ(c->model.max_position, 8192);
  EXPECT_EQ(c->model.tokenizer, dir.path() + "/ckpt/tokenizer.json");
}

TEST(ConfigCheckpoint, ExplicitShapeKeysAreForbidden) {
  PassThroughCheckpointReader reader;
  TempDir dir;
  dir.write("ckpt/config.json", kHfConfig);
  EXPECT_THAT(error_lines(load_text("model:\n  checkpoint: " + dir.path() + "/ckpt\n",
                                    {"model.hidden_size=64"})),
              ElementsAre(AllOf(HasSubstr("--set model.hidden_size=64: `model.hidden_size` "
                                          "cannot be set together with `model.checkpoint` "
                                          "(run.yaml:2)"))));
}

TEST(ConfigCheckpoint, MissingFolderOrConfigJsonOrFieldIsReported) {
  PassThroughCheckpointReader reader;
  EXPECT_THAT(error_lines(load_text("model:\n  checkpoint: /no/such/folder\n")),
              ElementsAre(HasSubstr("run.yaml:2: `model.checkpoint` = `/no/such/folder` is not an "
                                    "existing folder")));
  TempDir dir;
  dir.write("empty/readme", "");
  EXPECT_THAT(error_lines(load_text("model:\n  checkpoint: " + dir.path() + "/empty\n")),
              ElementsAre(HasSubstr("config.json` does not exist")));
  dir.write("broken/config.json", "{not json");
  EXPECT_THAT(error_lines(load_text("model:\n  checkpoint: " + dir.path() + "/broken\n")),
              ElementsAre(HasSubstr("is not a JSON object")));
  dir.write("partial/config.json", R"({"model_type": "qwen2", "hidden_size": "big"})");
  std::vector<std::string> lines =
      error_lines(load_text("model:\n  checkpoint: " + dir.path() + "/partial\n"));
  EXPECT_THAT(lines, ::testing::Contains(HasSubstr("`hidden_size` should be a number")));
  EXPECT_THAT(lines, ::testing::Contains(HasSubstr("has no `num_hidden_layers`")));
  dir.write("gpt/config.json", R"({"model_type": "gpt2"})");
  EXPECT_THAT(error_lines(load_text("model:\n  checkpoint: " + dir.path() + "/gpt\n")),
              ::testing::Contains(HasSubstr("`model_type` is `gpt2`")));
}

TEST(ConfigCheckpoint, Qwen2CheckpointHasQkvBias) {
  PassThroughCheckpointReader reader;
  TempDir dir;
  std::string json = kHfConfig;
  json.replace(json.find("llama"), 5, "qwen2");
  dir.write("q/config.json", json);
  Result<Config> c = load_text("model:\n  checkpoint: " + dir.path() + "/q\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.architecture, Architecture::kQwen2);
  EXPECT_TRUE(c->model.qkv_bias);
  EXPECT_THAT(c->model.tokenizer, IsEmpty());
}

// The reader's verdict is the config's: a refusal is an error of the load, naming the key.
Result<std::string> refusing_reader(const std::string& checkpoint) {
  return invalid_argument(checkpoint + "/config.json: `rope_scaling` = {\"rope_type\":\"longrope\"} is not supported");
}

TEST(ConfigCheckpoint, TheReadersRefusalIsTheLoadsError) {
  TempDir dir;
  dir.write("ckpt/config.json", kHfConfig);
  EXPECT_THAT(error_lines(load_text("model:\n  checkpoint: " + dir.path() + "/ckpt\n")),
              ElementsAre(HasSubstr("this program reads no checkpoints")));
  set_checkpoint_reader(&refusing_reader);
  EXPECT_THAT(error_lines(load_text("model:\n  checkpoint: " + dir.path() + "/ckpt\n")),
              ElementsAre(HasSubstr("run.yaml:2: `model.checkpoint`: " + dir.path() +
                                    "/ckpt/config.json: `rope_scaling` = {\"rope_type\":\"longrope\"} is not supported")));
  set_checkpoint_reader(nullptr);
}

TEST(ConfigCheckpoint, Qwen3AndGemma3CheckpointsNameTheirArchitecture) {
  PassThroughCheckpointReader reader;
  TempDir dir;
  for (auto [model_type, arch] : {std::pair{"qwen3", Architecture::kQwen3}, {"gemma3_text", Architecture::kGemma3}}) {
    std::string json = kHfConfig;
    json.replace(json.find("llama"), 5, model_type);
    dir.write(std::string(model_type) + "/config.json", json);
    Result<Config> c = load_text("model:\n  checkpoint: " + dir.path() + "/" + model_type + "\n");
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->model.architecture, arch);
    EXPECT_FALSE(c->model.qkv_bias);
  }
}

}  // namespace
}  // namespace rlrun
