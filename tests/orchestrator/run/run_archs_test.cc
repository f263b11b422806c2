// A short RL run from a Qwen3, a Llama 3.x (llama3 RoPE) and a Gemma 3 checkpoint (sliding-window
// layers beside a global one): tiny random models that transformers 5 wrote (the fixture
// hf_arch_reference_setup, tests/reference/hf_arch_reference.py's run_* variants, vocab 512 for
// the built-in tokenizer). The run trains two steps and exports its final weights as an HF folder.
// transformers 5 reads that folder as the checkpoint's model (hf_arch_reference.py check-export
// --config-only: class, config, RoPE of every layer type, parameter names and shapes), and its
// greedy ids on it equal `rlrun generate`'s on the same folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/observe/log.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class RunArchs : public ::testing::TestWithParam<std::string> {};

TEST_P(RunArchs, ExportLoadsInTransformers5AndGeneratesRlrunsGreedyIds) {
  const fs::path checkpoint = fs::path(RLRUN_HF_ARCH_REFERENCE_DIR) / ("run_" + GetParam()) / "model";
  ASSERT_TRUE(fs::exists(checkpoint / "config.json"))
      << checkpoint << " (written by the ctest fixture hf_arch_reference_setup)";
  testing::TempDir dir;
  const std::string config = dir.write("run.yaml", str("launcher: local\n"
                                                       "number_of_steps: 2\n"
                                                       "prompts_batch_size_for_trainer: 2\n"
                                                       "group_size: 4\n"
                                                       "max_tokens: 8\n"
                                                       "max_prompt_tokens: 32\n"
                                                       "max_model_len: 64\n"
                                                       "seq_len: 128\n"
                                                       "discard_group_zero_advantage: false\n"
                                                       "learning_rate: 1e-3\n"
                                                       "metrics_bind: 127.0.0.1:0\n"
                                                       "model:\n"
                                                       "  checkpoint: ", checkpoint.string(), "\n"
                                                       "task:\n"
                                                       "  name: arithmetic\n"
                                                       "  max_digits: 1\n"
                                                       "  eval_size: 4\n"));
  const std::string run = dir.path() + "/run";
  const testing::CliRun r = testing::run_rlrun(dir, "'" + config + "' --run-dir '" + run + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 2);
  EXPECT_GT(summary["samples"]["trained"].get<int64_t>(), 0);

  const fs::path model = fs::path(run) / "model";
  ASSERT_EQ(summary["model"], model.string());
  const testing::CliRun same = testing::run_shell(
      dir, str("'", RLRUN_PYREF5_PYTHON, "' '", RLRUN_SOURCE_DIR,
               "/tests/reference/hf_arch_reference.py' check-export --config-only --variant '",
               checkpoint.parent_path().string(), "' --export '", model.string(), "'"));
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;

  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 42}, {300, 12, 99, 7, 260, 41, 8, 120, 77}};
  const int kNew = 12;
  std::string hf_args;
  for (const auto& p : prompts) hf_args += " --prompt-ids " + testing::ids_arg(p);
  const testing::CliRun hf = testing::run_shell(
      dir, str("'", RLRUN_PYREF5_PYTHON, "' '", RLRUN_SOURCE_DIR, "/tests/reference/hf_generate.py' '", model.string(),
               "' --max-new-tokens ", kNew, hf_args));
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  const json hf_ids = json::parse(hf.out)["completions"];
  for (size_t i = 0; i < prompts.size(); ++i) {
    const testing::CliRun gen = testing::run_rlrun(
        dir, str("generate --threads 1 --checkpoint '", model.string(), "' --temperature 0 --json --max-tokens ", kNew,
                 " --prompt-ids ", testing::ids_arg(prompts[i])));
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    const std::vector<int32_t> got = json::parse(gen.out)["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> want = hf_ids[i].get<std::vector<int32_t>>();
    // rlrun stops at an end token; transformers ran all kNew tokens (no stop ids given).
    ASSERT_FALSE(got.empty());
    ASSERT_LE(got.size(), want.size());
    EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + static_cast<int64_t>(got.size())))
        << "prompt " << i << ": transformers 5 on the export";
    std::printf("[run archs] %-7s prompt %zu: %zu greedy ids of the export, equal to transformers 5's\n",
                GetParam().c_str(), i, got.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, RunArchs, ::testing::Values("qwen3", "llama3", "gemma3"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace rlrun::orchestrator
