// `rlrun generate` end to end: the real binary on a tiny random checkpoint the test writes (with
// the tiny tokenizer), its error handling, and the real SmolLM2-135M-Instruct against HF
// transformers' greedy generate.
//
// The SmolLM2 folder lives under build/models/ (or $RLRUN_MODELS_DIR), made by
// scripts/fetch-test-models.sh; a missing folder FAILS (CI fetches it), unless
// RLRUN_SKIP_MODEL_TESTS=1. The HF comparison runs tests/reference/hf_generate.py in the venv of
// scripts/setup-python-ref.sh.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/io/hf_config.h"
#include "engine/io/model_io.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/generate.h"
#include "tests/engine/model/model_test_util.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;
using rlrun::testing::CliRun;
using rlrun::testing::ids_arg;
using rlrun::testing::read_all;
using rlrun::testing::run_shell;
using rlrun::testing::skip_model_tests;
using rlrun::testing::smollm2_dir;
using rlrun::testing::TempDir;

CliRun rlrun(const TempDir& dir, const std::string& args) {
  return run_shell(dir, str("'", RLRUN_BINARY, "' generate --threads 1 ", args));
}

// A random tiny model (vocabulary 400 over the tiny tokenizer's 397 tokens) saved as an HF
// folder with the tiny tokenizer, once per test binary.
class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    engine::ModelConfig c = engine::testing::tiny_config(false);
    c.vocab_size = 400;
    c.eos_token_id = 2;
    auto backend = engine::testing::cpu_backend();
    auto model = engine::Model::create(*backend, c);
    ASSERT_TRUE(model.ok());
    (*model)->weights().init_random(11, 0.3f);
    ASSERT_TRUE(engine::save_weights(**model, checkpoint(), engine::DType::kF32).ok());
    fs::copy_file(fs::path(RLRUN_SOURCE_DIR) / "configs/tokenizers/tiny.json", fs::path(checkpoint()) / "tokenizer.json");
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string checkpoint() { return dir_->path() + "/tiny"; }

  json generate_json(const std::string& args) {
    CliRun r = rlrun(*dir_, str("--checkpoint '", checkpoint(), "' --json ", args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "stdout is not one JSON object: " << r.out;
    return j;
  }

  // Log-probs of the completion under Model::forward over prompt + completion (the trainer's path).
  static std::vector<float> training_logprobs(const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids) {
    auto backend = engine::testing::cpu_backend();
    auto model = engine::load_model(*backend, checkpoint());
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), ids.begin(), ids.end());
    engine::testing::HostBatch hb;
    hb.add_sequence(all, engine::testing::shifted_targets(all));
    auto out = (*model)->forward(hb.batch(), false);
    EXPECT_TRUE(out.ok());
    const std::vector<float> lp = engine::to_host_f32(out->logprobs);
    return std::vector<float>(lp.begin() + static_cast<long>(prompt.size()) - 1, lp.end() - 1);
  }

  static TempDir* dir_;
};
TempDir* GenerateCli::dir_ = nullptr;

TEST_F(GenerateCli, JsonOutputHasIdsLogprobsAndText) {
  const json j = generate_json("--prompt-ids 1,300,301,5 --max-tokens 7 --temperature 0");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), (std::vector<int32_t>{1, 300, 301, 5}));
  const auto ids = j["ids"].get<std::vector<int32_t>>();
  const auto logprobs = j["logprobs"].get<std::vector<float>>();
  ASSERT_GE(ids.size(), 1u);
  EXPECT_EQ(logprobs.size(), ids.size());
  EXPECT_TRUE(j["text"].is_string());
  const std::string finish = j["finish_reason"].get<std::string>();
  EXPECT_TRUE(finish == "length" ? ids.size() == 7 : finish == "stop") << finish << " after " << ids.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_GE(ids[i], 0);
    EXPECT_LT(ids[i], 400);
    EXPECT_LE(logprobs[i], 0.0f);
  }
}

TEST_F(GenerateCli, GreedyIsDeterministicAndItsLogprobsAreTheTrainingPaths) {
  const std::string args = "--prompt 'What is the sum of 12 and 30?' --max-tokens 8 --temperature 0";
  const json a = generate_json(args), b = generate_json(args + " --seed 9");
  EXPECT_EQ(a, b);  // greedy ignores the seed
  const auto prompt = a["prompt_ids"].get<std::vector<int32_t>>();
  const auto ids = a["ids"].get<std::vector<int32_t>>();
  auto tok = engine::Tokenizer::load(checkpoint() + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(prompt, tok->encode("What is the sum of 12 and 30?"));
  engine::testing::expect_near_all(a["logprobs"].get<std::vector<float>>(), training_logprobs(prompt, ids), 1e-4f,
                                   "greedy logprobs vs Model::forward");
  engine::DecodeOptions skip;
  skip.skip_special_tokens = true;
  EXPECT_EQ(a["text"].get<std::string>(), *tok->decode(ids, skip));
  // Without --json: the text alone on stdout.
  CliRun plain = rlrun(*dir_, str("--checkpoint '", checkpoint(), "' ", args));
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, a["text"].get<std::string>() + "\n");
  EXPECT_THAT(plain.err, HasSubstr("tokens/s"));
}

TEST_F(GenerateCli, SamplingFollowsTheSeedAndReportsTheModelsLogprobs) {
  const std::string args = "--prompt-ids 1,2,3,4 --max-tokens 10 --temperature 1 --top-p 1";
  const json a = generate_json(args + " --seed 4"), b = generate_json(args + " --seed 4");
  EXPECT_EQ(a, b);
  const json c = generate_json(args + " --seed 5");
  EXPECT_NE(a["ids"], c["ids"]);
  engine::testing::expect_near_all(a["logprobs"].get<std::vector<float>>(),
                                   training_logprobs({1, 2, 3, 4}, a["ids"].get<std::vector<int32_t>>()), 1e-4f,
                                   "sampled logprobs (T = 1) vs Model::forward");
}

// Every user mistake: exit 2, one line on stderr naming the problem, nothing on stdout.
TEST_F(GenerateCli, BadInputsGiveOneErrorLineAndExitTwo) {
  TempDir scratch;
  const std::string no_tokenizer = scratch.path() + "/no_tok", broken = scratch.path() + "/broken";
  fs::create_directories(no_tokenizer);
  fs::copy_file(checkpoint() + "/config.json", no_tokenizer + "/config.json");
  fs::copy_file(checkpoint() + "/model.safetensors", no_tokenizer + "/model.safetensors");
  scratch.write("broken/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": ");
  const std::string ck = str("--checkpoint '", checkpoint(), "' ");
  const std::pair<std::string, std::string> cases[] = {
      {"--prompt-ids 1,2", "missing --checkpoint"},
      {"--checkpoint /nonexistent/model --prompt-ids 1,2", "/nonexistent/model"},
      {ck, "exactly one of --prompt"},
      {ck + "--prompt hi --prompt-ids 1", "exactly one of --prompt"},
      {ck + "--prompt-ids 1,x", "`x` is not a token id"},
      {ck + "--prompt-ids 1,,2", "is not a token id"},
      {ck + "--prompt-ids -3", "is not a token id"},
      {ck + "--prompt-ids 1,400", "id 400 is outside the vocabulary [0, 400)"},
      {ck + "--prompt-ids 1 --temperature -1", "--temperature"},
      {ck + "--prompt-ids 1 --temperature warm", "expected a number"},
      {ck + "--prompt-ids 1 --top-p 0", "--top-p"},
      {ck + "--prompt-ids 1 --max-tokens 0", "--max-tokens"},
      {ck + "--prompt-ids 1 --max-tokens", "needs a value"},
      {ck + "--prompt-ids 1 --bogus", "unknown flag `--bogus`"},
      {ck + "--prompt-ids 1 extra", "unexpected argument `extra`"},
      {str("--checkpoint '", no_tokenizer, "' --prompt hello"), "tokenizer.json"},
      {str("--checkpoint '", broken, "' --prompt-ids 1"), "config.json"},
      {str("--checkpoint '", scratch.path(), "' --prompt-ids 1"), "config.json"},
  };
  for (const auto& [args, expected] : cases) {
    CliRun r = rlrun(scratch, args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(expected)) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith("rlrun generate: ")) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  // --prompt-ids needs no tokenizer: ids are printed instead of text.
  CliRun ok = rlrun(scratch, str("--checkpoint '", no_tokenizer, "' --prompt-ids 1,2 --max-tokens 3 --temperature 0"));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, ::testing::MatchesRegex("[0-9]+(,[0-9]+)*\n"));
}

TEST(GenerateCliHelp, ExplainsEveryFlag) {
  TempDir dir;
  CliRun r = run_shell(dir, str("'", RLRUN_BINARY, "' generate --help"));
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--checkpoint", "--prompt ", "--prompt-ids", "--max-tokens", "--temperature", "--top-p",
                           "--seed", "--json", "--threads"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

// ---- the real model -----------------------------------------------------------------------------

// Greedy SmolLM2 answers the ChatML question, and its greedy ids for two prompts are exactly
// transformers' greedy generate on the same folder.
TEST(GenerateSmolLM2, GreedyMatchesTransformersAndKnowsTheCapitalOfFrance) {
  if (!fs::exists(smollm2_dir() / "model.safetensors")) {
    if (skip_model_tests()) GTEST_SKIP() << smollm2_dir() << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << smollm2_dir() << " is missing: run scripts/setup.sh --test (or scripts/fetch-test-models.sh) "
           << "to fetch the test models, or set RLRUN_SKIP_MODEL_TESTS=1 to skip this test";
  }
  TempDir dir;
  const std::string ck = str("--checkpoint '", smollm2_dir().string(), "' --temperature 0 --json ");
  const CliRun chat = rlrun(dir, ck + "--max-tokens 12 --prompt '<|im_start|>user\nWhat is the capital of France?"
                                      "<|im_end|>\n<|im_start|>assistant\n'");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  std::printf("[smollm2] %s", chat.err.c_str());
  const CliRun plain = rlrun(dir, ck + "--max-tokens 16 --prompt 'The three primary colors are'");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::printf("[smollm2] %s", plain.err.c_str());
  const json a = json::parse(chat.out), b = json::parse(plain.out);
  std::printf("[smollm2] chat: %s\n[smollm2] plain: %s\n", a["text"].dump().c_str(), b["text"].dump().c_str());
  EXPECT_THAT(a["text"].get<std::string>(), HasSubstr("Paris"));

  auto config = engine::read_hf_config((smollm2_dir() / "config.json").string());
  auto tok = engine::Tokenizer::load((smollm2_dir() / "tokenizer.json").string());
  ASSERT_TRUE(config.ok() && tok.ok());
  const std::string stop = ids_arg(rollout::stop_token_ids(*config, &*tok, tok->token_to_id("<|im_end|>")));
  const std::string python = RLRUN_PYREF_PYTHON;
  ASSERT_TRUE(fs::exists(python)) << python << " is missing: run scripts/setup-python-ref.sh";
  const CliRun hf = run_shell(
      dir, str("'", python, "' '", RLRUN_SOURCE_DIR, "/tests/reference/hf_generate.py' '", smollm2_dir().string(),
               "' --max-new-tokens 16 --stop-ids ", stop, " --prompt-ids ",
               ids_arg(a["prompt_ids"].get<std::vector<int32_t>>()), " --prompt-ids ",
               ids_arg(b["prompt_ids"].get<std::vector<int32_t>>())));
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  const json ref = json::parse(hf.out, nullptr, false);
  ASSERT_FALSE(ref.is_discarded()) << hf.out;
  std::vector<int32_t> chat_ref = ref["completions"][0].get<std::vector<int32_t>>();
  if (chat_ref.size() > 12) chat_ref.resize(12);  // rlrun ran with --max-tokens 12
  EXPECT_EQ(a["ids"].get<std::vector<int32_t>>(), chat_ref);
  EXPECT_EQ(b["ids"].get<std::vector<int32_t>>(), ref["completions"][1].get<std::vector<int32_t>>());
}

// The Q4_1 .gguf that the folder was converted from generates the folder's greedy ids and text
// (its dequantized weights are bit-identical: tests/engine/io/gguf_model_test.cc), and a run
// config may name it as model.checkpoint.
TEST(GenerateSmolLM2, GgufFileGivesTheFoldersGreedyIds) {
  const fs::path gguf = smollm2_dir().parent_path() / "smollm2-135m-instruct.Q4_1.gguf";
  if (!fs::exists(gguf) || !fs::exists(smollm2_dir() / "model.safetensors")) {
    if (skip_model_tests()) GTEST_SKIP() << gguf << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << gguf << " or " << smollm2_dir() << " is missing: run scripts/setup.sh --test (or "
           << "scripts/fetch-test-models.sh) to fetch the test models, or set RLRUN_SKIP_MODEL_TESTS=1 to skip this test";
  }
  TempDir dir;
  const std::string args = "--temperature 0 --json --max-tokens 16 --prompt '<|im_start|>user\nWhat is the capital "
                           "of France?<|im_end|>\n<|im_start|>assistant\n'";
  const CliRun from_gguf = rlrun(dir, str("--checkpoint '", gguf.string(), "' ", args));
  ASSERT_EQ(from_gguf.exit_code, 0) << from_gguf.err;
  const CliRun from_folder = rlrun(dir, str("--checkpoint '", smollm2_dir().string(), "' ", args));
  ASSERT_EQ(from_folder.exit_code, 0) << from_folder.err;
  const json a = json::parse(from_gguf.out), b = json::parse(from_folder.out);
  std::printf("[smollm2 gguf] %s[smollm2 gguf] %s\n", from_gguf.err.c_str(), a["text"].dump().c_str());
  EXPECT_EQ(a["prompt_ids"], b["prompt_ids"]);
  EXPECT_EQ(a["ids"], b["ids"]);
  EXPECT_EQ(a["text"], b["text"]);
  EXPECT_THAT(a["text"].get<std::string>(), HasSubstr("Paris"));

  const std::string config = dir.write("run.yaml", str("model:\n  checkpoint: ", gguf.string(), "\n"));
  const CliRun validate = rlrun::testing::run_rlrun(dir, str("validate '", config, "'"));
  EXPECT_EQ(validate.exit_code, 0) << validate.err;
  EXPECT_THAT(validate.out, HasSubstr("# hidden_size: 576"));
  EXPECT_THAT(validate.out, HasSubstr(str("tokenizer: \"", gguf.string(), "\"")));
}

}  // namespace
}  // namespace rlrun
