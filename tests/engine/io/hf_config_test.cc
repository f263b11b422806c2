#include "engine/io/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <fstream>
#include <random>
#include <cmath>

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
      {with(kLlamaJson, "rope_scaling", R"({"rope_type":"longrope","factor":2.0})"),
       "`rope_scaling.rope_type` = \"longrope\" is not supported (supported RoPE types: default, linear, dynamic, "
       "llama3, yarn)"},
      {with(kLlamaJson, "rope_scaling", R"({"type":"su","factor":2.0})"), "`rope_scaling.type` = \"su\""},
      {with(kLlamaJson, "rope_scaling", R"({"rope_type":"linear","factor":2.0,"scale_mode":"x"})"),
       "`rope_scaling.scale_mode` = \"x\" is not a RoPE parameter rlrun knows"},
      {with(kLlamaJson, "rope_parameters", R"({"rope_type":"llama3","factor":8.0})"),
       "`rope_parameters` of type llama3 needs `low_freq_factor`"},
      {with(kLlamaJson, "head_dim", "63"), "head_dim 63 must be even"},
      {with(kLlamaJson, "attn_logit_softcapping", "50.0"), "`attn_logit_softcapping` = 50.0 is not supported"},
      {with(kLlamaJson, "final_logit_softcapping", "30.0"), "`final_logit_softcapping` = 30.0 is not supported"},
      {with(kLlamaJson, "partial_rotary_factor", "0.5"), "`partial_rotary_factor` = 0.5 is not supported"},
      {with(kLlamaJson, "attention_dropout", "0.1"), "`attention_dropout` = 0.1 is not supported"},
      {with(kLlamaJson, "num_experts", "8"), "`num_experts` = 8 is not supported (mixture of experts"},
      {with(kLlamaJson, "quantization_config", R"({"quant_method":"gptq"})"), "`quantization_config` = "},
      {with(kLlamaJson, "some_new_field", "1.5"),
       "`some_new_field` = 1.5 is a config.json field rlrun does not know; it may change what the model computes"},
      {with(kLlamaJson, "architectures", R"(["Qwen3MoeForCausalLM"])"), "Qwen3MoeForCausalLM"},
      {with(kLlamaJson, "text_config", R"({"hidden_size":8})"), "multimodal"},
      {with(kLlamaJson, "sliding_window", "4096"), "`sliding_window` = 4096 is not supported"},
      {with(kLlamaJson, "query_pre_attn_scalar", "256"), "`query_pre_attn_scalar` = 256 is not supported (a gemma3"},
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

// Transformers 5 keeps theta and the scaling in `rope_parameters` and may list eos ids: a Qwen2.5
// saved by it must run at its own theta (1e6), not the 1e4 default.
TEST(HfConfig, ReadsTransformers5Format) {
  std::string qwen5 = with(kQwen2Json, "rope_theta", "");
  qwen5 = with(qwen5, "rope_parameters", R"({"rope_theta": 1000000.0, "rope_type": "default"})");
  qwen5 = with(qwen5, "layer_types", R"(["full_attention", "full_attention"])");
  qwen5 = with(with(qwen5, "torch_dtype", ""), "dtype", R"("bfloat16")");
  Result<ModelConfig> c = parse_hf_config(qwen5, "q5");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, "default");
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_EQ(c->extra_eos_token_ids, (std::vector<int64_t>{5}));
  EXPECT_TRUE(c->layer_types.empty());  // all full

  const std::string llama3 = R"({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192)";
  Result<ModelConfig> v4 = parse_hf_config(with(with(kLlamaJson, "rope_theta", "500000.0"), "rope_scaling", llama3 + "}"), "v4");
  Result<ModelConfig> v5 = parse_hf_config(
      with(with(kLlamaJson, "rope_theta", ""), "rope_parameters", llama3 + R"(, "rope_theta": 500000.0})"), "v5");
  ASSERT_TRUE(v4.ok()) << v4.status().to_string();
  ASSERT_TRUE(v5.ok()) << v5.status().to_string();
  EXPECT_EQ(*v4, *v5);
  EXPECT_EQ(v4->rope_theta, 500000.0);
  EXPECT_EQ(v4->rope_scaling.type, "llama3");
  EXPECT_EQ(v4->rope_scaling.factor, 32.0);
  EXPECT_EQ(v4->rope_scaling.original_max_position, 8192);
  EXPECT_EQ(v4->rope_scaling.high_freq_factor, 4.0);
}

TEST(HfConfig, YarnAttentionFactorIsTransformers5s) {
  Result<ModelConfig> c = parse_hf_config(
      with(kQwen2Json, "rope_scaling", R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})"), "y");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, "yarn");
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(c->rope_scaling.beta_fast, 32.0);
}

// Gemma 3 as transformers 4.5x wrote it (sliding_window_pattern, rope_local_base_freq) and as 5.x
// does (layer_types, rope_parameters per layer type) is one model.
TEST(HfConfig, ReadsGemma3InBothFormats) {
  const std::string common = R"("architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
      "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 7,
      "num_key_value_heads": 1, "head_dim": 32, "hidden_activation": "gelu_pytorch_tanh", "vocab_size": 96,
      "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "sliding_window": 8, "query_pre_attn_scalar": 32,
      "attn_logit_softcapping": null, "final_logit_softcapping": null, "pad_token_id": 0, "eos_token_id": [1, 106],
      "bos_token_id": 2, "torch_dtype": "bfloat16", "cache_implementation": "hybrid")";
  const std::string v4 = "{" + common + R"(, "sliding_window_pattern": 6, "rope_theta": 1000000.0,
      "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})";
  const std::string v5 = "{" + common + R"(, "layer_types": ["sliding_attention", "sliding_attention",
      "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})";
  Result<ModelConfig> a = parse_hf_config(v4, "g4");
  Result<ModelConfig> b = parse_hf_config(v5, "g5");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->architecture, "gemma3");
  EXPECT_EQ(a->head_dim(), 32);
  EXPECT_TRUE(a->qk_norm);
  EXPECT_TRUE(a->sandwich_norms);
  EXPECT_EQ(a->norm_weight_offset, 1.0);
  EXPECT_EQ(a->hidden_act, "gelu_pytorch_tanh");
  EXPECT_DOUBLE_EQ(a->embedding_scale, 8.0);  // sqrt(64)
  EXPECT_DOUBLE_EQ(a->attention_scale(), 1.0 / std::sqrt(32.0));
  EXPECT_TRUE(a->tie_embeddings);  // gemma3's default
  EXPECT_TRUE(a->is_sliding(0));
  EXPECT_FALSE(a->is_sliding(5));
  EXPECT_TRUE(a->is_sliding(6));
  EXPECT_EQ(a->layer_rope_theta(0), 1e4);
  EXPECT_EQ(a->layer_rope_theta(5), 1e6);
  EXPECT_EQ(a->rope_scaling.type, "linear");
  EXPECT_EQ(a->pad_token_id, 0);
  EXPECT_EQ(a->extra_eos_token_ids, (std::vector<int64_t>{106}));
  EXPECT_EQ(a->torch_dtype, "bfloat16");
  Result<ModelConfig> sliding_scaled = parse_hf_config(
      with(v5, "rope_parameters", R"({"sliding_attention": {"rope_type": "yarn", "factor": 2.0}})"), "g");
  EXPECT_THAT(sliding_scaled.status().message(), HasSubstr("`rope_parameters.sliding_attention.rope_type`"));
  EXPECT_THAT(parse_hf_config(with(v5, "hidden_activation", R"("gelu")"), "g").status().message(),
              HasSubstr("`hidden_activation` = \"gelu\" is not supported (gemma3: gelu_pytorch_tanh)"));
}

TEST(HfConfig, ReadsQwen3) {
  std::string q3 = with(with(kQwen2Json, "architectures", R"(["Qwen3ForCausalLM"])"), "model_type", R"("qwen3")");
  q3 = with(with(q3, "head_dim", "32"), "attention_bias", "false");
  Result<ModelConfig> c = parse_hf_config(q3, "q3");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "qwen3");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->head_dim(), 32);  // not 64 / 4
  const std::vector<TensorSpec> specs = hf_tensor_specs(*c);
  auto shape_of = [&](const std::string& name) {
    for (const TensorSpec& s : specs)
      if (s.name == name) return s.shape;
    return std::vector<int64_t>{-1};
  };
  EXPECT_EQ(shape_of("model.layers.0.self_attn.q_proj.weight"), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.o_proj.weight"), (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(shape_of("model.layers.1.self_attn.k_norm.weight"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shape_of("model.layers.1.self_attn.q_proj.bias"), (std::vector<int64_t>{-1}));
}

// docs/models.md lists every field the reader knows, so the page cannot fall behind the allow-list.
TEST(HfConfigFields, EveryFieldIsDocumented) {
  std::ifstream in(std::string(RLRUN_SOURCE_DIR) + "/docs/models.md");
  ASSERT_TRUE(in.good());
  const std::string doc(std::istreambuf_iterator<char>(in), {});
  for (const HfConfigField& f : hf_config_fields()) EXPECT_THAT(doc, HasSubstr("| `" + std::string(f.name) + "` |"));
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
    ModelConfig expected = *c;
    expected.torch_dtype = "float32";  // what the export says the weights are
    EXPECT_EQ(*back, expected);
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
