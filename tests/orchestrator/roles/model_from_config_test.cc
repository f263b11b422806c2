// model_config_from: the config's model section as the engine's ModelConfig.
#include "orchestrator/roles/model_from_config.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/atomic_file.h"
#include "engine/io/hf_config.h"
#include "engine/io/model_io.h"
#include "rollout/generate.h"
#include "tests/common/config_test_util.h"

namespace rlrun::orchestrator {
namespace {

TEST(ModelFromConfig, CopiesEveryShapeField) {
  ModelSection s;
  s.architecture = Architecture::kQwen2;
  s.hidden_size = 96;
  s.num_layers = 3;
  s.num_heads = 6;
  s.num_kv_heads = 2;
  s.intermediate_size = 200;
  s.vocab_size = 300;
  s.rope_theta = 5e5;
  s.rms_norm_eps = 1e-6;
  s.tie_embeddings = true;
  s.qkv_bias = true;
  s.max_position = 777;
  const engine::ModelConfig m = *model_config_from(s);
  EXPECT_EQ(m.architecture, "qwen2");
  EXPECT_EQ(m.hidden_size, 96);
  EXPECT_EQ(m.num_layers, 3);
  EXPECT_EQ(m.num_heads, 6);
  EXPECT_EQ(m.num_kv_heads, 2);
  EXPECT_EQ(m.intermediate_size, 200);
  EXPECT_EQ(m.vocab_size, 300);
  EXPECT_DOUBLE_EQ(m.rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(m.rms_norm_eps, 1e-6);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_EQ(m.max_position, 777);
  EXPECT_EQ(m.head_dim(), 16);
}

TEST(ModelFromConfig, DefaultsAgreeWithTheEngine) {
  // Both describe the same default decoder; a drift would make `model:` defaults surprising.
  const engine::ModelConfig from_config = *model_config_from(ModelSection{});
  const engine::ModelConfig engine_default;
  EXPECT_EQ(from_config.architecture, engine_default.architecture);
  EXPECT_EQ(from_config.num_parameters(), engine_default.num_parameters());
  EXPECT_EQ(from_config.max_position, engine_default.max_position);
}

TEST(ModelFromConfig, QuickstartModelIsOneToThreeMillionParameters) {
  Result<Config> c = load_config(std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status().message();
  const int64_t n = model_config_from(c->model)->num_parameters();
  EXPECT_GE(n, 1'000'000);
  EXPECT_LE(n, 3'000'000);
}

// The run's requests stop where `rlrun generate` and `rlrun serve` stop (rollout::stop_token_ids):
// at the template's end of turn first (the warm start ends answers with it), at every eos id of
// the checkpoint's config.json, and at the end-of-text tokens the tokenizer has.
TEST(RunStopTokenIds, AreTheListGenerateAndServeUse) {
  testing::TempDir dir;
  engine::ModelConfig model = model_config_from(ModelSection{}).value();
  model.eos_token_id = 5;
  model.extra_eos_token_ids = {7};
  ASSERT_TRUE(write_file_atomic(dir.path() + "/config.json", hf_config_json(model, "float32").value()).ok());
  Config config;
  config.model.checkpoint = dir.path();
  const engine::Tokenizer tokenizer =
      engine::Tokenizer::load(std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json").value();
  const std::optional<int32_t> end_of_turn = tokenizer.token_to_id("<|im_end|>");
  ASSERT_TRUE(end_of_turn.has_value());

  const std::vector<int32_t> run = run_stop_token_ids(config, tokenizer, end_of_turn);
  const engine::ModelConfig checkpoint = engine::read_checkpoint_config(dir.path()).value();
  EXPECT_EQ(run, rollout::stop_token_ids(checkpoint, &tokenizer, end_of_turn));
  ASSERT_FALSE(run.empty());
  EXPECT_EQ(run.front(), *end_of_turn) << "the end of turn first";
  for (const int32_t id : {5, 7, *tokenizer.token_to_id("<|endoftext|>")})
    EXPECT_NE(std::find(run.begin(), run.end(), id), run.end()) << "stop token " << id << " missing";
}

}  // namespace
}  // namespace rlrun::orchestrator
