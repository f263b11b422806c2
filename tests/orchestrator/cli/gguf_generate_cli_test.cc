// `rlrun generate --chat` on a GGUF file as users download it: Qwen2.5-Coder-0.5B-Instruct Q4_K_M
// (scripts/fetch-model.sh). The prompt ids must equal transformers 5's apply_chat_template on the
// same file, and the greedy ids those of transformers' fp32 forward pass over the weights it
// loads from the file (gguf_reference.py `model`, run by scripts/fetch-test-models.sh; the weights
// are bit-identical to rlrun's: tests/engine/io/gguf_downloads_test.cc).
// A missing file FAILS (scripts/fetch-test-models.sh fetches it) unless RLRUN_SKIP_MODEL_TESTS=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/io/model_io.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using rlrun::testing::CliRun;
using rlrun::testing::run_rlrun;
using rlrun::testing::skip_model_tests;
using rlrun::testing::TempDir;

fs::path models_dir() { return rlrun::testing::smollm2_dir().parent_path(); }

TEST(GgufGenerateCli, QwenChatGreedyIdsEqualTransformers) {
  const fs::path gguf = models_dir() / "qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf";
  const fs::path reference = models_dir() / "gguf-golden/qwen2.5-coder-0.5b-instruct.Q4_K_M.model/greedy.jsonl";
  const fs::path chat = models_dir() / "gguf-golden/qwen2.5-coder-0.5b-instruct.Q4_K_M.tokenizer/chat.jsonl";
  for (const fs::path& p : {gguf, reference, chat}) {
    if (fs::exists(p)) continue;
    if (skip_model_tests()) GTEST_SKIP() << p << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << p << " is missing: run scripts/fetch-test-models.sh, or set RLRUN_SKIP_MODEL_TESTS=1";
  }
  std::ifstream chat_in(chat), reference_in(reference);
  std::string chat_line, reference_line;
  ASSERT_TRUE(std::getline(chat_in, chat_line) && std::getline(reference_in, reference_line));
  const json conversation = json::parse(chat_line), want = json::parse(reference_line);
  ASSERT_EQ(conversation["messages"].size(), 1u);  // one user message: what --chat --prompt renders
  const std::string question = conversation["messages"][0]["content"];

  TempDir dir;
  const CliRun run = run_rlrun(dir, str("generate --threads 2 --checkpoint '", gguf.string(), "' --chat --prompt '",
                                        question, "' --temperature 0 --max-tokens 16 --json"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json got = json::parse(run.out);
  std::printf("[qwen gguf] %s[qwen gguf] %s\n", run.err.c_str(), got["text"].dump().c_str());

  EXPECT_EQ(got["prompt_ids"], conversation["ids"]) << "apply_chat_template's ids";
  EXPECT_EQ(want["prompt_ids"], conversation["ids"]);
  // rlrun stops at <|im_end|>; transformers' reference ran the full 16 tokens.
  const std::vector<int32_t> ids = got["ids"], ref = want["ids"];
  ASSERT_FALSE(ids.empty());
  ASSERT_LE(ids.size(), ref.size());
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), ref.begin())) << run.out << "\nvs\n" << reference_line;
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i) worst = std::max(worst, std::abs(got["logprobs"][i].get<double>() - want["logprobs"][i].get<double>()));
  std::printf("[qwen gguf] %zu greedy ids equal to transformers'; largest log-prob difference %.2e\n", ids.size(), worst);
  EXPECT_LT(worst, 1e-3);
  EXPECT_NE(got["text"].get<std::string>().find('4'), std::string::npos) << "2+2 answered sensibly";
}

// `rlrun generate --prompt-ids` on `gguf`, greedy, against a reference line {"prompt_ids", "ids",
// "logprobs"} (transformers' fp32 forward). Skips, saying why, while the engine refuses the model.
void expect_greedy_equal(const fs::path& gguf, const json& want, const std::string& tag) {
  Result<engine::ModelConfig> config = engine::read_checkpoint_config(gguf.string());
  if (!config.ok() && config.status().message().find("not implemented yet") != std::string::npos) {
    GTEST_SKIP() << tag << ": " << config.status().message();
  }
  ASSERT_TRUE(config.ok()) << config.status().message();
  std::string ids_arg;
  for (int32_t id : want["prompt_ids"].get<std::vector<int32_t>>()) {
    if (!ids_arg.empty()) ids_arg += ',';
    ids_arg += std::to_string(id);
  }
  TempDir dir;
  const size_t n = want["ids"].size();
  const CliRun run = run_rlrun(dir, str("generate --threads 2 --checkpoint '", gguf.string(), "' --prompt-ids ", ids_arg,
                                        " --temperature 0 --max-tokens ", n, " --json"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json got = json::parse(run.out);
  const std::vector<int32_t> ids = got["ids"], ref = want["ids"];
  ASSERT_FALSE(ids.empty());
  ASSERT_LE(ids.size(), ref.size());  // rlrun stops at an end-of-sequence id
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), ref.begin())) << tag << ": " << run.out << "\nvs\n" << want.dump();
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i) worst = std::max(worst, std::abs(got["logprobs"][i].get<double>() - want["logprobs"][i].get<double>()));
  std::printf("[%s] %zu greedy ids equal to transformers'; largest log-prob difference %.2e\n", tag.c_str(), ids.size(), worst);
  EXPECT_LT(worst, 1e-3) << tag;
}

// Tiny random models that llama.cpp's converter wrote (scripts/gguf_reference.py tiny): Llama 3.2
// RoPE scaling read back from rope_freqs, Qwen3, Gemma 3.
void expect_tiny_greedy_equal(const std::string& arch) {
  const fs::path dir = models_dir() / "gguf-golden" / ("tiny-" + arch);
  if (!fs::exists(dir / "greedy.json")) {
    if (skip_model_tests()) GTEST_SKIP() << dir << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << dir << " is missing: run scripts/fetch-test-models.sh, or set RLRUN_SKIP_MODEL_TESTS=1";
  }
  std::ifstream in(dir / "greedy.json");
  expect_greedy_equal(dir / "model.gguf", json::parse(in), "tiny " + arch);
}

TEST(GgufGenerateCli, TinyLlama3GreedyIdsEqualTransformers) { expect_tiny_greedy_equal("llama"); }
TEST(GgufGenerateCli, TinyQwen3GreedyIdsEqualTransformers) { expect_tiny_greedy_equal("qwen3"); }
TEST(GgufGenerateCli, TinyGemma3GreedyIdsEqualTransformers) { expect_tiny_greedy_equal("gemma3"); }

// The real Gemma 3 270M (base) Q4_K_M file on plain prompts (BOS first, as its tokenizer adds it).
TEST(GgufGenerateCli, GemmaGreedyIdsEqualTransformers) {
  const fs::path gguf = models_dir() / "gemma-3-270m.Q4_K_M.gguf";
  const fs::path reference = models_dir() / "gguf-golden/gemma-3-270m.Q4_K_M.model/greedy.jsonl";
  for (const fs::path& p : {gguf, reference}) {
    if (fs::exists(p)) continue;
    if (skip_model_tests()) GTEST_SKIP() << p << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << p << " is missing: run scripts/fetch-test-models.sh, or set RLRUN_SKIP_MODEL_TESTS=1";
  }
  std::ifstream in(reference);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  expect_greedy_equal(gguf, json::parse(line), "gemma gguf");
}

}  // namespace
}  // namespace rlrun
