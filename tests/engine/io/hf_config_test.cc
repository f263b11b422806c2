#include "engine/io/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <fstream>
#include <random>

#include "engine/bf16.h"
#include "engine/io/hf_checkpoint.h"

namespace rlrun::engine {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// As written by transformers 4.44.2's Qwen2Config.save_pretrained (tiny sizes).
const char* kQwen2Json = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
  "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
  "max_position_embeddings": 128, "max_window_layers": 28, "model_type": "qwen2",
  "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "float32",
  "transformers_version": "4.44.2", "use_cache": true, "use_sliding_window": false, "vocab_size": 96,
  "bos_token_id": 1, "eos_token_id": [2, 5]})";

// SmolLM2-135M's shape.
const char* kLlamaJson = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
  "intermediate_size": 1536, "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
  "hidden_act": "silu", "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000,
  "rope_scaling": null, "tie_word_embeddings": true, "vocab_size": 49152, "bos_token_id": 1,
  "eos_token_id": 2, "attention_bias": false, "mlp_bias": false, "head_dim": 64, "pretraining_tp": 1})";

TEST(HfConfig, ParsesQwen2) {
  Result<ModelConfig> c = parse_hf_config(kQwen2Json, "q/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "qwen2");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->intermediate_size, 128);
  EXPECT_EQ(c->vocab_size, 96);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_EQ(c->max_position, 128);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);  // first of the list
}

TEST(HfConfig, ParsesLlamaAndDefaults) {
  Result<ModelConfig> c = parse_hf_config(kLlamaJson, "l/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->num_kv_heads, 3);
  EXPECT_EQ(c->head_dim(), 64);
  EXPECT_EQ(c->num_parameters(), 134515008);  // SmolLM2-135M's published count
  Result<ModelConfig> minimal = parse_hf_config(
      R"({"model_type":"llama","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,)"
      R"("intermediate_size":16,"vocab_size":10})", "m");
  ASSERT_TRUE(minimal.ok()) << minimal.status().to_string();
  EXPECT_EQ(minimal->num_kv_heads, 2);
  EXPECT_EQ(minimal->rope_theta, 10000.0);
  EXPECT_EQ(minimal->bos_token_id, -1);
  EXPECT_FALSE(minimal->tie_embeddings);
}

std::string with(const std::string& base, const std::string& key, const std::string& value) {
  nlohmann::json j = nlohmann::json::parse(base);
  if (value.empty()) {
    j.erase(key);
  } else {
    j[key] = nlohmann::json::parse(value);
  }
  return j.dump();
}

TEST(HfConfig, RefusesUnsupportedFeaturesNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with(kLlamaJson, "rope_scaling", R"({"type":"linear","factor":2.0})"), "`rope_scaling`"},
      {with(kLlamaJson, "head_dim", "128"), "`head_dim`"},
      {with(kLlamaJson, "hidden_act", R"("gelu")"), "`hidden_act`"},
      {with(kLlamaJson, "attention_bias", "true"), "`attention_bias`"},
      {with(kLlamaJson, "mlp_bias", "true"), "`mlp_bias`"},
      {with(kQwen2Json, "use_sliding_window", "true"), "`use_sliding_window`"},
      {with(kLlamaJson, "architectures", R"(["MistralForCausalLM"])"), "MistralForCausalLM"},
      {with(kLlamaJson, "hidden_size", ""), "missing required key `hidden_size`"},
      {with(kLlamaJson, "hidden_size", "-5"), "`hidden_size` must be an integer"},
      {with(kLlamaJson, "vocab_size", "1e30"), "`vocab_size` must be an integer"},
      {with(kLlamaJson, "num_hidden_layers", "99999999999"), "`num_hidden_layers` must be an integer"},
      {with(kLlamaJson, "num_key_value_heads", "4"), "not a multiple of num_kv_heads"},
      {with(kLlamaJson, "rms_norm_eps", "0"), "`rms_norm_eps` must be a positive number"},
      {with(kLlamaJson, "tie_word_embeddings", R"("yes")"), "`tie_word_embeddings` must be true or false"},
      {with(kLlamaJson, "eos_token_id", R"("x")"), "`eos_token_id`"},
      {"{nope", "not a valid JSON object"},
  };
  for (const auto& [text, expected] : cases) {
    Result<ModelConfig> c = parse_hf_config(text, "bad/config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_THAT(c.status().message(), HasSubstr("bad/config.json")) << text;
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << text;
  }
}

TEST(HfConfig, JsonRoundTrips) {
  for (const char* text : {kQwen2Json, kLlamaJson}) {
    Result<ModelConfig> c = parse_hf_config(text, "in");
    ASSERT_TRUE(c.ok());
    Result<std::string> json = hf_config_json(*c, "float32");
    ASSERT_TRUE(json.ok()) << json.status().to_string();
    Result<ModelConfig> back = parse_hf_config(*json, "out");
    ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << *json;
    EXPECT_EQ(back->architecture, c->architecture);
    EXPECT_EQ(back->num_parameters(), c->num_parameters());
    EXPECT_EQ(back->rope_theta, c->rope_theta);
    EXPECT_EQ(back->rms_norm_eps, c->rms_norm_eps);
    EXPECT_EQ(back->tie_embeddings, c->tie_embeddings);
    EXPECT_EQ(back->max_position, c->max_position);
    EXPECT_EQ(back->eos_token_id, c->eos_token_id);
  }
  ModelConfig llama_with_bias;
  llama_with_bias.qkv_bias = true;
  EXPECT_THAT(hf_config_json(llama_with_bias, "float32").status().message(), HasSubstr("qkv_bias"));
}

TEST(HfTensorSpecs, NamesAndShapesCoverEveryParameter) {
  ModelConfig c = *parse_hf_config(kQwen2Json, "q");
  std::vector<TensorSpec> specs = hf_tensor_specs(c);
  int64_t total = 0;
  for (const TensorSpec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total += n;
  }
  EXPECT_EQ(total, c.num_parameters());
  EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(specs.back().name, "model.norm.weight");  // tied: no lm_head
  EXPECT_EQ(specs.size(), 1 + 2 * 12 + 1u);
  auto find = [&](const std::string& name) {
    for (const TensorSpec& s : specs) {
      if (s.name == name) return s.shape;
    }
    return std::vector<int64_t>{-1};
  };
  EXPECT_EQ(find("model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{32, 64}));  // (out, in)
  EXPECT_EQ(find("model.layers.1.self_attn.k_proj.bias"), (std::vector<int64_t>{32}));
  EXPECT_EQ(find("model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{64, 128}));
  c.tie_embeddings = false;
  c.architecture = "llama";
  c.qkv_bias = false;
  specs = hf_tensor_specs(c);
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  EXPECT_EQ(specs.back().shape, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(specs.size(), 2 + 2 * 9 + 1u);
}

}  // namespace
}  // namespace rlrun::engine
