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

// Every tensor rlrun reads from the GGUF against the HF safetensors value of the same name;
// `tolerance` (in units of the value's ulp) for tensors the converter rewrote arithmetically.
void expect_tensors_equal_hf(const HfCheckpoint& checkpoint, const std::string& arch, int ulps_for_norms = 0) {
  Result<SafetensorsFile> st = SafetensorsFile::open((tiny_dir(arch) / "hf/model.safetensors").string());
  ASSERT_TRUE(st.ok()) << st.status().message();
  size_t compared = 0;
  for (const HostTensor& t : checkpoint.tensors) {
    Result<std::vector<float>> want = st->read_f32(t.name, t.shape);
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_EQ(t.data.size(), want->size()) << t.name;
    const int ulps = t.name.ends_with("norm.weight") ? ulps_for_norms : 0;
    size_t differ = 0;
    for (size_t i = 0; i < want->size(); ++i) {
      const float a = t.data[i], b = (*want)[i];
      const float ulp = std::nextafter(std::abs(b), INFINITY) - std::abs(b);
      differ += ulps == 0 ? std::bit_cast<uint32_t>(a) != std::bit_cast<uint32_t>(b) : !(std::abs(a - b) <= ulps * ulp);
    }
    EXPECT_EQ(differ, 0u) << t.name << ": " << differ << " of " << want->size() << " values differ";
    ++compared;
  }
  std::printf("tiny %s: %zu tensors equal to the HF model's\n", arch.c_str(), compared);
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

TEST(GgufTiny, LlamaTensorsEqualTheHfModelsWithQkRowsUnpermuted) {
  REQUIRE_MODEL_FILE(tiny_dir("llama") / "model.gguf");
  expect_tensors_equal_hf(load("llama"), "llama");
}

TEST(GgufTiny, LlamaBpeTokenizerEncodesAsTransformersBuildsIt) {
  REQUIRE_MODEL_FILE(tiny_dir("llama") / "tokenizer");
  testing::expect_tokenizer_matches(tiny_dir("llama") / "model.gguf", tiny_dir("llama") / "tokenizer");
}

}  // namespace
}  // namespace rlrun::engine
