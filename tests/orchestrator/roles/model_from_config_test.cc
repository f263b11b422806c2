// model_config_from: the config's model section as the engine's ModelConfig.
#include "orchestrator/roles/model_from_config.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace rlrun::orchestrator
