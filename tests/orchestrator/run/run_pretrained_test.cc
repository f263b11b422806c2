// `rlrun CONFIG` from a pretrained HF folder: the real SmolLM2-135M-Instruct (model.checkpoint, a
// path relative to the config file) trains a few RL steps on the CPU, and the summary accounts for
// every sample. Before, the effective config the workers read repeated the checkpoint's shape keys
// and both workers refused it, so no run could start from a pretrained model.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/observe/log.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Two steps of a run from `checkpoint` (a folder or a .gguf file), linked beside the config as
// `name`; the run's log says how prompts reach the model (`prompts`: task.chat_template auto; `chat`:
// the model has a chat template).
void train_two_steps(const fs::path& checkpoint, const std::string& name, const std::string& prompts, bool chat) {
  if (!fs::exists(checkpoint)) {
    if (testing::skip_model_tests()) GTEST_SKIP() << checkpoint << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << checkpoint << " is missing: run scripts/setup.sh --test, or set RLRUN_SKIP_MODEL_TESTS=1";
  }
  testing::TempDir dir;
  // The checkpoint beside the config, named relatively: the config's folder is what it is relative to.
  fs::create_symlink(checkpoint, fs::path(dir.path()) / name);
  const std::string config = dir.write("configs/pretrained.yaml",
                                       "launcher: local\n"
                                       "number_of_steps: 2\n"
                                       "prompts_batch_size_for_trainer: 2\n"
                                       "group_size: 4\n"
                                       "max_tokens: 8\n"
                                       "max_prompt_tokens: 64\n"  // the .gguf's chat template adds a system prompt
                                       "max_model_len: 96\n"
                                       "seq_len: 192\n"
                                       "discard_group_zero_advantage: false\n"
                                       "learning_rate: 1e-6\n"
                                       "metrics_bind: 127.0.0.1:0\n"
                                       "model:\n"
                                       "  checkpoint: ../" + name + "\n"
                                       "task:\n"
                                       "  name: arithmetic\n"
                                       "  max_digits: 1\n"
                                       "  eval_size: 4\n");
  const testing::CliRun validated = testing::run_rlrun(dir, "validate '" + config + "'");
  ASSERT_EQ(validated.exit_code, 0) << validated.err;
  EXPECT_NE(validated.out.find("# hidden_size: 576"), std::string::npos) << validated.out;

  const std::string run = dir.path() + "/run";
  const testing::CliRun r = testing::run_rlrun(dir, "'" + config + "' --run-dir '" + run + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(prompts), std::string::npos) << "prompts given as `" << prompts << "`:\n" << r.err;
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 2);
  const json& samples = summary["samples"];
  EXPECT_EQ(samples["lost"], 0);
  EXPECT_EQ(samples["anomalies"], 0);
  int64_t discarded = 0;
  for (const auto& [reason, n] : samples["discarded"].items()) discarded += n.get<int64_t>();
  EXPECT_GT(samples["trained"].get<int64_t>(), 0);
  // Every generated sample was trained or discarded, by reason (as in run_e2e_test.cc).
  EXPECT_EQ(samples["trained"].get<int64_t>() + discarded - samples["discarded"].value("generation_error", 0),
            samples["generated"].get<int64_t>())
      << summary.dump(2);
  EXPECT_TRUE(summary["eval"]["accuracy_after"].is_number());

  // The run leaves its final weights as an HF folder that transformers loads and that generates
  // greedily what `rlrun generate` generates on it (the prompt in the model's chat template).
  const fs::path model = fs::path(run) / "model";
  EXPECT_EQ(summary["model"], model.string());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(model / f)) << f;
  }
  const std::string python = RLRUN_PYREF_PYTHON;
  ASSERT_TRUE(fs::exists(python)) << python << " is missing: run scripts/setup-python-ref.sh";
  const std::string question = "What is 2 + 3?";
  const testing::CliRun tok = testing::run_shell(
      dir, str("'", python, "' '", RLRUN_SOURCE_DIR, "/tests/reference/hf_tokenize.py' '", model.string(), "' ",
               chat ? "--chat" : "--text", " '", question, "'"));
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  const json t = json::parse(tok.out);
  const testing::CliRun gen = testing::run_rlrun(
      dir, str("generate --threads 1 --checkpoint '", model.string(), "' --temperature 0 --json --max-tokens 12 ",
               chat ? "--chat " : "", "--prompt '", question, "'"));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const json g = json::parse(gen.out);
  const std::vector<int32_t> prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  // HF's tokenizer from the folder: the same ids, in the exported template when there is one.
  EXPECT_EQ(prompt, (chat ? t["chat"][0]["ids"] : t["ids"][0]).get<std::vector<int32_t>>());
  const testing::CliRun hf = testing::run_shell(
      dir, str("'", python, "' '", RLRUN_SOURCE_DIR, "/tests/reference/hf_generate.py' '", model.string(),
               "' --max-new-tokens 12 --stop-ids 2 --prompt-ids ", testing::ids_arg(prompt)));
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  EXPECT_EQ(g["ids"], json::parse(hf.out)["completions"][0]) << g["text"];
}

TEST(RunPretrained, SmolLM2CheckpointTrainsAndAccountsForEverySample) {
  // The folder the test fetch converts has no tokenizer_config.json: no template, raw prompts.
  train_two_steps(testing::smollm2_dir(), "smollm2", "prompts: raw text", false);
}

// The same model from the .gguf it was converted from: the workers dequantize it and take its
// tokenizer from its metadata, and prompts are user messages in its chat template.
TEST(RunPretrained, SmolLM2GgufTrainsAndAccountsForEverySample) {
  train_two_steps(testing::smollm2_dir().parent_path() / "smollm2-135m-instruct.Q4_1.gguf", "smollm2.gguf",
                  "prompts: the chat template of ", true);
}

}  // namespace
}  // namespace rlrun::orchestrator
