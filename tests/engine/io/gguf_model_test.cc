// The real SmolLM2-135M-Instruct Q4_1 GGUF file against references made from it in Python:
// the `gguf` package's dequantization of every tensor (scripts/gguf_golden.py), the HF folder that
// scripts/fetch_test_models.py converted from it (weights and tokenizer.json). Generation from the
// .gguf through `rlrun generate`: tests/orchestrator/cli/generate_cli_test.cc.
//
// The files live under build/models/ (or $RLRUN_MODELS_DIR), made by scripts/fetch-test-models.sh.
// A missing file FAILS the test (CI runs setup.sh --test, which fetches them); set
// RLRUN_SKIP_MODEL_TESTS=1 to skip them on a machine that cannot fetch.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/io/gguf.h"
#include "engine/io/gguf_dequant.h"
#include "engine/io/gguf_model.h"
#include "engine/io/hf_checkpoint.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/io/gguf_golden.h"

namespace rlrun::engine {
namespace {

namespace fs = std::filesystem;
using testing::models_dir;

const fs::path kGguf = models_dir() / "smollm2-135m-instruct.Q4_1.gguf";
const fs::path kGolden = models_dir() / "gguf-golden/smollm2-135m-instruct.Q4_1.json";
const fs::path kFolder = models_dir() / "smollm2-135m-instruct";

TEST(GgufModel, DequantizationMatchesTheGgufPackage) {
  REQUIRE_MODEL_FILE(kGguf);
  REQUIRE_MODEL_FILE(kGolden);
  Result<GgufFile> file = GgufFile::open(kGguf.string());
  ASSERT_TRUE(file.ok()) << file.status().message();
  for (const auto& [type, tally] : testing::expect_dequantization_matches(*file, kGolden)) {
    std::printf("%s: %d tensors, %lld values bit-identical to gguf.dequantize\n", type.c_str(), tally.tensors,
                static_cast<long long>(tally.values));
  }
}

TEST(GgufModel, WeightsEqualTheConvertedHfFolder) {
  REQUIRE_MODEL_FILE(kGguf);
  REQUIRE_MODEL_FILE(kFolder / "model.safetensors");
  std::vector<double> seconds;
  Result<HfCheckpoint> gguf = internal_error("not loaded");
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    gguf = load_gguf_checkpoint(kGguf.string());
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    ASSERT_TRUE(gguf.ok()) << gguf.status().message();
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("load_gguf_checkpoint (parse + dequantize + rename): median of 3 %.3f s\n", seconds[1]);
  Result<HfCheckpoint> hf = load_hf_checkpoint(kFolder.string());
  ASSERT_TRUE(hf.ok()) << hf.status().message();

  const ModelConfig &a = gguf->config, &b = hf->config;
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.max_position, b.max_position);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_id, b.eos_token_id);

  ASSERT_EQ(gguf->tensors.size(), hf->tensors.size());
  size_t values = 0;
  for (size_t i = 0; i < hf->tensors.size(); ++i) {
    const HostTensor &g = gguf->tensors[i], &h = hf->tensors[i];
    ASSERT_EQ(g.name, h.name);
    ASSERT_EQ(g.shape, h.shape) << g.name;
    size_t differ = 0;
    for (size_t k = 0; k < g.data.size(); ++k) differ += std::bit_cast<uint32_t>(g.data[k]) != std::bit_cast<uint32_t>(h.data[k]);
    EXPECT_EQ(differ, 0u) << g.name << ": " << differ << " of " << g.data.size() << " values differ";
    values += g.data.size();
  }
  std::printf("%zu tensors, %zu values: bit-identical to %s\n", hf->tensors.size(), values,
              (kFolder / "model.safetensors").c_str());
}

TEST(GgufModel, TokenizerEncodesLikeTheFoldersTokenizerJson) {
  REQUIRE_MODEL_FILE(kGguf);
  REQUIRE_MODEL_FILE(kFolder / "tokenizer.json");
  Result<Tokenizer> gguf = load_gguf_tokenizer(kGguf.string());
  ASSERT_TRUE(gguf.ok()) << gguf.status().message();
  Result<Tokenizer> hf = Tokenizer::load((kFolder / "tokenizer.json").string());
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  ASSERT_EQ(gguf->vocab_size(), hf->vocab_size());
  for (const char* text : {"The capital of France is", "Hello, world! 12345 + 678 = 13023",
                           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
                           "  leading spaces\tand tabs\n\nnewlines", "naïve café 東京 🙂", "",
                           "def f(x):\n    return x ** 2  # square"}) {
    EXPECT_EQ(gguf->encode(text), hf->encode(text)) << text;
  }
  for (int32_t id : {0, 1, 2, 100, 49151}) {
    EXPECT_EQ(gguf->id_to_token(id), hf->id_to_token(id)) << id;
    EXPECT_EQ(gguf->is_special(id), hf->is_special(id)) << id;
  }
  const std::vector<int32_t> ids = hf->encode("Paris is the capital of France.");
  EXPECT_EQ(gguf->decode(ids).value(), "Paris is the capital of France.");
}

TEST(GgufModel, RefusesAFileThatIsNotALlamaModel) {
  // A valid GGUF with no metadata: the config names the first missing key and the file.
  std::vector<uint8_t> bytes = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  bytes.resize(24, 0);
  Result<GgufFile> file = GgufFile::parse("empty.gguf", bytes);
  ASSERT_TRUE(file.ok()) << file.status().message();
  Result<ModelConfig> config = gguf_model_config(*file);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(), "empty.gguf: no metadata `general.architecture`");
  EXPECT_FALSE(is_gguf_path("model"));
  EXPECT_TRUE(is_gguf_path("dir/model.Q4_1.gguf"));
}

}  // namespace
}  // namespace rlrun::engine
