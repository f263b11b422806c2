// Tiny random HF models converted to GGUF by llama.cpp's own convert_hf_to_gguf.py
// (scripts/gguf_reference.py `tiny`, run by scripts/fetch-test-models.sh), read back by rlrun:
// the config must say what the HF config.json says, and every tensor must equal the HF
// safetensors value (after llama.cpp's Q/K permutation is undone, for llama only). The llama one
// is Llama 3.2-style: RoPE scaling in a rope_freqs tensor and the llama-bpe pre-tokenizer, whose
// ids are checked against transformers 5 on the same file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/io/gguf_model.h"
#include "engine/io/hf_config.h"
#include "engine/io/safetensors.h"
#include "tests/engine/io/gguf_golden.h"

namespace rlrun::engine {
namespace {

namespace fs = std::filesystem;

fs::path tiny_dir(const std::string& arch) { return testing::models_dir() / "gguf-golden" / ("tiny-" + arch); }

nlohmann::json hf_config(const std::string& arch) {
  std::ifstream in(tiny_dir(arch) / "hf/config.json");
  return nlohmann::json::parse(in);
}

// Every tensor rlrun reads from the GGUF against the HF safetensors value of the same name,
// bit for bit; but with `norm_offset` (Gemma's 1), which llama.cpp's converter adds to every norm
// weight in fp32 and rlrun subtracts again, a norm value w may come back as fl(fl(1 + w) - 1):
// off by at most half an ulp of 1 + w, the one rounding of the addition.
void expect_tensors_equal_hf(const HfCheckpoint& checkpoint, const std::string& arch, float norm_offset = 0) {
  Result<SafetensorsFile> st = SafetensorsFile::open((tiny_dir(arch) / "hf/model.safetensors").string());
  ASSERT_TRUE(st.ok()) << st.status().message();
  size_t compared = 0;
  for (const HostTensor& t : checkpoint.tensors) {
    Result<std::vector<float>> want = st->read_f32(t.name, t.shape);
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_EQ(t.data.size(), want->size()) << t.name;
    const bool offset = norm_offset != 0 && t.name.ends_with("norm.weight");
    size_t differ = 0;
    for (size_t i = 0; i < want->size(); ++i) {
      const float a = t.data[i], b = (*want)[i];
      if (!offset) {
        differ += std::bit_cast<uint32_t>(a) != std::bit_cast<uint32_t>(b);
        continue;
      }
      const float stored = std::abs(norm_offset + b);
      differ += !(std::abs(a - b) <= 0.5f * (std::nextafter(stored, INFINITY) - stored));
    }
    EXPECT_EQ(differ, 0u) << t.name << ": " << differ << " of " << want->size() << " values differ";
    ++compared;
  }
  std::printf("tiny %s: %zu tensors equal to the HF model's\n", arch.c_str(), compared);
}

// The config rlrun reads from the GGUF against the one its HF reader reads from the config.json
// the file was converted from: every field that changes the math.
void expect_same_model(const std::string& arch, const ModelConfig& g) {
  Result<ModelConfig> hf = read_hf_config((tiny_dir(arch) / "hf/config.json").string());
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  const ModelConfig& h = *hf;
  EXPECT_EQ(g.architecture, h.architecture);
  EXPECT_EQ(g.hidden_size, h.hidden_size);
  EXPECT_EQ(g.num_layers, h.num_layers);
  EXPECT_EQ(g.num_heads, h.num_heads);
  EXPECT_EQ(g.num_kv_heads, h.num_kv_heads);
  EXPECT_EQ(g.head_dim(), h.head_dim());
  EXPECT_EQ(g.intermediate_size, h.intermediate_size);
  EXPECT_EQ(g.vocab_size, h.vocab_size);
  EXPECT_EQ(g.max_position, h.max_position);
  EXPECT_EQ(g.tie_embeddings, h.tie_embeddings);
  EXPECT_EQ(g.qkv_bias, h.qkv_bias);
  EXPECT_EQ(g.qk_norm, h.qk_norm);
  EXPECT_EQ(g.rope_theta, h.rope_theta);
  EXPECT_EQ(static_cast<float>(g.rms_norm_eps), static_cast<float>(h.rms_norm_eps));  // GGUF stores an f32
  EXPECT_TRUE(g.rope_scaling == h.rope_scaling) << g.rope_scaling.type << " vs " << h.rope_scaling.type;
  EXPECT_EQ(g.rope_local_theta, h.rope_local_theta);
  EXPECT_EQ(g.hidden_act, h.hidden_act);
  EXPECT_EQ(g.norm_weight_offset, h.norm_weight_offset);
  EXPECT_EQ(g.sandwich_norms, h.sandwich_norms);
  EXPECT_EQ(g.embedding_scale, h.embedding_scale);
  EXPECT_EQ(g.query_pre_attn_scalar, h.query_pre_attn_scalar);
  EXPECT_EQ(g.sliding_window, h.sliding_window);
  EXPECT_EQ(g.layer_types, h.layer_types);
  EXPECT_EQ(g.bos_token_id, h.bos_token_id);
  EXPECT_EQ(g.eos_token_id, h.eos_token_id);
}

HfCheckpoint load(const std::string& arch) {
  Result<HfCheckpoint> c = load_gguf_checkpoint((tiny_dir(arch) / "model.gguf").string());
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(*c) : HfCheckpoint{};
}

TEST(GgufTiny, LlamaConfigAndRopeScalingEqualTheHfConfig) {
  REQUIRE_MODEL_FILE(tiny_dir("llama") / "model.gguf");
  const HfCheckpoint checkpoint = load("llama");
  const ModelConfig& c = checkpoint.config;
  const nlohmann::json hf = hf_config("llama"), rope = hf["rope_parameters"];
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.hidden_size, hf["hidden_size"]);
  EXPECT_EQ(c.num_layers, hf["num_hidden_layers"]);
  EXPECT_EQ(c.num_heads, hf["num_attention_heads"]);
  EXPECT_EQ(c.num_kv_heads, hf["num_key_value_heads"]);
  EXPECT_EQ(c.head_dim(), hf["head_dim"]);
  EXPECT_EQ(c.intermediate_size, hf["intermediate_size"]);
  EXPECT_EQ(c.max_position, hf["max_position_embeddings"]);
  EXPECT_EQ(c.vocab_size, hf["vocab_size"]);
  EXPECT_EQ(c.tie_embeddings, hf["tie_word_embeddings"]);
  EXPECT_EQ(static_cast<float>(c.rms_norm_eps), hf["rms_norm_eps"].get<float>());
  EXPECT_EQ(c.rope_theta, rope["rope_theta"].get<double>());
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, rope["factor"].get<double>());
  EXPECT_EQ(c.rope_scaling.low_freq_factor, rope["low_freq_factor"].get<double>());
  EXPECT_EQ(c.rope_scaling.high_freq_factor, rope["high_freq_factor"].get<double>());
  EXPECT_EQ(c.rope_scaling.original_max_position, rope["original_max_position_embeddings"].get<int64_t>());
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
}

TEST(GgufTiny, LlamaIsTheModelTheHfReaderReads) {
  REQUIRE_MODEL_FILE(tiny_dir("llama") / "model.gguf");
  expect_same_model("llama", load("llama").config);
}

TEST(GgufTiny, LlamaTensorsEqualTheHfModelsWithQkRowsUnpermuted) {
  REQUIRE_MODEL_FILE(tiny_dir("llama") / "model.gguf");
  expect_tensors_equal_hf(load("llama"), "llama");
}

TEST(GgufTiny, LlamaBpeTokenizerEncodesAsTransformersBuildsIt) {
  REQUIRE_MODEL_FILE(tiny_dir("llama") / "tokenizer");
  testing::expect_tokenizer_matches(tiny_dir("llama") / "model.gguf", tiny_dir("llama") / "tokenizer");
}

TEST(GgufTiny, Qwen3IsTheModelTheHfReaderReads) {
  REQUIRE_MODEL_FILE(tiny_dir("qwen3") / "model.gguf");
  const HfCheckpoint checkpoint = load("qwen3");
  EXPECT_EQ(checkpoint.config.architecture, "qwen3");
  EXPECT_TRUE(checkpoint.config.qk_norm);
  EXPECT_EQ(checkpoint.config.head_dim(), 32);  // not hidden / heads = 16
  expect_same_model("qwen3", checkpoint.config);
  expect_tensors_equal_hf(checkpoint, "qwen3");  // llama.cpp permutes no qwen3 rows
}

// Gemma 3's norms are stored as 1 + w: w_file - 1 can round away from w by half an ulp of 1 + w.
TEST(GgufTiny, Gemma3IsTheModelTheHfReaderReads) {
  REQUIRE_MODEL_FILE(tiny_dir("gemma3") / "model.gguf");
  const HfCheckpoint checkpoint = load("gemma3");
  const ModelConfig& c = checkpoint.config;
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.layer_types[5], "full_attention");
  EXPECT_EQ(c.layer_types[6], "sliding_attention");
  EXPECT_EQ(c.rope_local_theta, 10000.0);
  expect_same_model("gemma3", c);
  expect_tensors_equal_hf(checkpoint, "gemma3", /*norm_offset=*/1.0f);
}

}  // namespace
}  // namespace rlrun::engine
