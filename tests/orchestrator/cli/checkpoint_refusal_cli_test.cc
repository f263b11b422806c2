// One reader, one verdict (issue 37): every path of the real binary that takes a checkpoint refuses
// one whose config.json would be computed wrongly, before it starts, naming the field, its value and
// what is supported. The checkpoint holds only config.json: nothing may get as far as its weights.
// The model line of validate and of a run's log names what was read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::testing {
namespace {

using ::testing::HasSubstr;

// A Llama 3.x shape whose RoPE type rlrun does not implement, and one with a field it has never seen.
constexpr char kLlama[] = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
  "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "vocab_size": 600, "max_position_embeddings": 1024, "rope_theta": 500000.0, "torch_dtype": "bfloat16", )";
constexpr char kLongrope[] = R"("rope_scaling": {"rope_type": "longrope", "factor": 4.0}})";
constexpr char kUnknown[] = R"("rope_scaling": null, "attn_temperature_tuning": 4})";

struct Refused {
  std::string name, config_tail, message;
};

class CheckpointRefusal : public ::testing::TestWithParam<Refused> {
 protected:
  void SetUp() override {
    dir_.write("ckpt/config.json", std::string(kLlama) + GetParam().config_tail);
    config_ = dir_.write("run.yaml", "model:\n  checkpoint: ckpt\nrun_dir: run\nmax_model_len: 64\nseq_len: 64\n"
                                     "max_tokens: 8\nmax_prompt_tokens: 32\nnumber_of_steps: 1\n");
    dir_.write("tuned/config.yaml", "model:\n  checkpoint: " + dir_.path() + "/ckpt\n");
  }
  void expect_refused(const std::string& what, const CliRun& r) {
    EXPECT_NE(r.exit_code, 0) << what << "\n" << r.out << r.err;
    EXPECT_THAT(r.err + r.out, HasSubstr(GetParam().message)) << what;
    EXPECT_THAT(r.err + r.out, HasSubstr(dir_.path() + "/ckpt/config.json")) << what;
  }
  TempDir dir_;
  std::string config_;
};

TEST_P(CheckpointRefusal, EveryPathRefusesNamingTheField) {
  const std::string ckpt = dir_.path() + "/ckpt";
  expect_refused("validate", run_rlrun(dir_, "validate '" + config_ + "'"));
  expect_refused("plan", run_rlrun(dir_, "plan '" + config_ + "'"));
  expect_refused("run", run_rlrun(dir_, "'" + config_ + "'"));
  expect_refused("tune", run_rlrun(dir_, "tune '" + dir_.path() + "/tuned'"));
  expect_refused("trainer", run_rlrun(dir_, "trainer --orchestrator tcp://127.0.0.1:9 --rank 0 --config '" + config_ + "'"));
  expect_refused("rollout", run_rlrun(dir_, "rollout --orchestrator tcp://127.0.0.1:9 --index 0 --config '" + config_ + "'"));
  expect_refused("generate", run_rlrun(dir_, "generate --checkpoint '" + ckpt + "' --prompt-ids 1,2,3"));
  expect_refused("serve", run_rlrun(dir_, "serve --checkpoint '" + ckpt + "' --bind 127.0.0.1:0"));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, CheckpointRefusal,
    ::testing::Values(Refused{"unimplemented_rope_type", kLongrope,
                              "`rope_scaling.rope_type` = \"longrope\" is not supported (supported RoPE types: default, "
                              "linear, dynamic, llama3, yarn)"},
                      Refused{"unknown_field", kUnknown,
                              "`attn_temperature_tuning` = 4 is a config.json field rlrun does not know"}),
    [](const ::testing::TestParamInfo<Refused>& info) { return info.param.name; });

// validate names what it read: architecture, parameters, context, RoPE variant, dtype.
TEST(CheckpointModelLine, ValidateNamesTheModelRead) {
  TempDir dir;
  dir.write("ckpt/config.json", std::string(kLlama) +
                                    R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 256}})");
  const std::string config = dir.write("run.yaml", "model:\n  checkpoint: ckpt\n");
  const CliRun r = run_rlrun(dir, "validate '" + config + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model: llama, 150.8K parameters, context 1024, RoPE llama3 x8 of 256 (theta 500000), "
                               "head_dim 16, stored as bfloat16"));
}

}  // namespace
}  // namespace rlrun::testing
