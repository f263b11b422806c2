// Greedy ids through the rollout worker's engine (the Scheduler: continuous batching over the
// paged KV cache) for the architectures of issue 37 equal HF transformers 5's greedy ids (the
// fixture hf_arch_reference_setup: tests/reference/hf_arch_reference.py, greedy.json). Each prompt
// is a group of 3 samples at temperature 0, whose later samples fork the prompt's blocks from the
// first; the groups run together in a pool big enough for all, then in one so small that sequences
// are preempted and recomputed. Gemma 3's prompts of 9 and 14 tokens and 12 new ones cross its
// sliding window of 5 during decode; gemma3_local (every layer sliding) also frees the blocks left
// behind the window (engine/kv/kv_cache.h), and its ids must not change for it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/model_io.h"
#include "tests/rollout/rollout_test_util.h"

namespace rlrun::rollout {
namespace {

constexpr uint32_t kGroup = 3;

std::string variant_dir(const std::string& variant) { return std::string(RLRUN_HF_ARCH_REFERENCE_DIR) + "/" + variant; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path << " (written by the ctest fixture hf_arch_reference_setup)";
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

class HfArchRollout : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const nlohmann::json inputs = read_json(variant_dir(GetParam()) + "/inputs.json");
    ASSERT_TRUE(inputs.is_object());
    prompts_ = inputs["prompts"].get<std::vector<std::vector<int32_t>>>();
    want_ = read_json(variant_dir(GetParam()) + "/greedy.json")["ids"].get<std::vector<std::vector<int32_t>>>();
    backend_ = testing::cpu_backend();
    auto model = engine::load_model(*backend_, variant_dir(GetParam()) + "/model");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(model).value();
  }
  // Every prompt as a group of kGroup greedy samples, all added at once; returns the scheduler's
  // statistics after checking every sample's ids against transformers'.
  SchedulerStats run_groups(int64_t num_blocks, const char* what) {
    auto s = testing::make_scheduler(*model_, testing::small_options(num_blocks, /*block_size=*/4,
                                                                     /*max_model_len=*/32));
    for (size_t p = 0; p < prompts_.size(); ++p) {
      GenerationRequest r = testing::greedy_request(p, prompts_[p], static_cast<int64_t>(want_[p].size()));
      r.num_samples = kGroup;
      s->add(std::move(r));
    }
    const auto out = testing::run_to_end(*s);
    EXPECT_EQ(out.size(), prompts_.size() * kGroup);
    for (size_t p = 0; p < prompts_.size(); ++p) {
      for (uint32_t k = 0; k < kGroup; ++k) {
        auto it = out.find({p, k});
        const std::vector<int32_t> got = it != out.end() ? it->second.tokens : std::vector<int32_t>{};
        EXPECT_EQ(got, want_[p]) << what << ": prompt " << p << " sample " << k;
      }
    }
    const SchedulerStats st = s->stats();
    EXPECT_EQ(st.kv_blocks_used, 0) << what << ": blocks left in the pool after every sample finished";
    std::printf("[hf_arch rollout] %-14s %-10s %lld preemptions, %lld prompt tokens forked, %lld table entries "
                "freed outside the window\n",
                GetParam().c_str(), what, static_cast<long long>(st.preemptions),
                static_cast<long long>(st.prefix_tokens_shared), static_cast<long long>(st.kv_blocks_trimmed));
    return st;
  }

  std::vector<std::vector<int32_t>> prompts_, want_;
  std::unique_ptr<engine::Backend> backend_;
  std::unique_ptr<engine::Model> model_;
};

TEST_P(HfArchRollout, GroupsForkingTheirPromptAreGreedyTransformers) {
  const SchedulerStats st = run_groups(/*num_blocks=*/256, "big pool");
  EXPECT_EQ(st.preemptions, 0);
  EXPECT_GT(st.prefix_tokens_shared, 0) << "no sample forked its prompt";
  EXPECT_EQ(st.kv_blocks_trimmed > 0, GetParam() == "gemma3_local") << "only an all-sliding model frees blocks";
}

TEST_P(HfArchRollout, PreemptedGroupsInASmallPoolAreGreedyTransformers) {
  const SchedulerStats st = run_groups(/*num_blocks=*/9, "small pool");
  EXPECT_GT(st.preemptions, 0) << "9 blocks of 4 held every sample: nothing was preempted";
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfArchRollout,
                         ::testing::Values("qwen2_v5", "qwen3", "llama3", "llama_linear", "llama_dynamic", "llama_yarn",
                                           "gemma3_global", "gemma3", "gemma3_local"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace rlrun::rollout
