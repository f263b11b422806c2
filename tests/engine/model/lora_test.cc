// LoRA adapters' layout, initialisation and buffers, and the PEFT adapter folder both ways: names
// and shapes as PEFT saves them, A drawn as torch.nn.Linear's kaiming-uniform, B zero, a folder
// written then read gives the same adapters, and a PEFT config rlrun does not compute is refused.
#include "engine/model/lora.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/cpu/cpu_backend.h"
#include "engine/io/peft_adapter.h"
#include "tests/common/config_test_util.h"

namespace rlrun::engine {
namespace {

using ::testing::HasSubstr;

ModelConfig small_model() {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 48;
  c.vocab_size = 64;
  return c;
}

TEST(Lora, LayoutNamesAndShapesAreThoseOfPeft) {
  LoraConfig lc;
  lc.rank = 4;
  const std::vector<ParamInfo> layout = lora_layout(small_model(), lc);
  ASSERT_EQ(layout.size(), 2u * 7 * 2);
  EXPECT_EQ(layout[0].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(layout[0].shape, (Shape{4, 32}));
  EXPECT_EQ(layout[1].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(layout[1].shape, (Shape{32, 4}));
  EXPECT_EQ(layout[3].shape, (Shape{16, 4})) << "k_proj out = 2 kv heads x 8";
  EXPECT_EQ(layout[12].name, "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight");
  EXPECT_EQ(layout[12].shape, (Shape{4, 48}));
  for (const ParamInfo& p : layout) EXPECT_EQ(p.offset % kParamAlign, 0) << p.name;
}

TEST(Lora, TargetsParseAsPeftNamesThem) {
  auto all = parse_lora_targets("all-linear");
  ASSERT_TRUE(all.ok());
  for (bool t : *all) EXPECT_TRUE(t);
  auto some = parse_lora_targets("q_proj, v_proj");
  ASSERT_TRUE(some.ok());
  EXPECT_TRUE((*some)[0]);
  EXPECT_FALSE((*some)[1]);
  EXPECT_TRUE((*some)[2]);
  auto bad = parse_lora_targets("q_proj,qkv");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown module `qkv`"));
  LoraConfig lc;
  lc.rank = 2;
  lc.targets = *some;
  EXPECT_EQ(lora_layout(small_model(), lc).size(), 2u * 2 * 2);
}

TEST(Lora, AStartsKaimingUniformAndBAtZero) {
  cpu::CpuBackend be(1);
  LoraConfig lc;
  lc.rank = 8;
  Result<std::unique_ptr<LoraWeights>> w = LoraWeights::create(be, small_model(), lc);
  ASSERT_TRUE(w.ok()) << w.status().message();
  (*w)->init(3);
  const LoraPair& up = (*w)->layer(1)[static_cast<int>(LoraTarget::kUp)];
  const double bound = 1.0 / std::sqrt(32.0);
  double sum_sq = 0;
  for (int64_t i = 0; i < up.a.numel(); ++i) {
    EXPECT_LE(std::fabs(up.a.f32()[i]), bound);
    sum_sq += up.a.f32()[i] * up.a.f32()[i];
  }
  EXPECT_NEAR(sum_sq / static_cast<double>(up.a.numel()), bound * bound / 3, bound * bound / 10) << "U(-b, b)";
  for (int64_t i = 0; i < up.b.numel(); ++i) EXPECT_EQ(up.b.f32()[i], 0.0f);
  EXPECT_TRUE((*w)->has_grads());
  (*w)->release_grads();
  EXPECT_FALSE((*w)->has_grads());
  EXPECT_FALSE(LoraWeights::create(be, small_model(), LoraConfig{}).ok()) << "rank 0";
}

TEST(PeftAdapter, AFolderWrittenIsReadBackTheSame) {
  cpu::CpuBackend be(1);
  LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 8;
  lc.targets = *parse_lora_targets("q_proj,v_proj,down_proj");
  const ModelConfig model = small_model();
  std::vector<HostTensor> tensors;
  float value = 0.25f;
  for (const ParamInfo& p : lora_layout(model, lc)) {
    std::vector<float> data(static_cast<size_t>(p.numel));
    for (float& x : data) x = (value += 0.125f);
    tensors.push_back({p.name, std::vector<int64_t>(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank), data});
  }
  testing::TempDir dir;
  ASSERT_TRUE(save_peft_adapter(dir.path(), model, lc, tensors, "base").ok());
  Result<PeftAdapter> back = load_peft_adapter(dir.path(), model);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->config.rank, 4);
  EXPECT_EQ(back->config.alpha, 8);
  EXPECT_EQ(back->config.targets, lc.targets);
  ASSERT_EQ(back->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back->tensors[i].name, tensors[i].name);
    EXPECT_EQ(back->tensors[i].data, tensors[i].data);
  }
}

TEST(PeftAdapter, SettingsRlrunDoesNotComputeAreRefusedNamingTheField) {
  testing::TempDir dir;
  const ModelConfig model = small_model();
  auto config = [&](const std::string& extra) {
    dir.write("adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, "
                                     "\"target_modules\": [\"q_proj\"]" + extra + "}");
    return load_peft_adapter(dir.path(), model);
  };
  EXPECT_THAT(config(", \"use_dora\": true").status().message(), HasSubstr("`use_dora` = true is not supported"));
  EXPECT_THAT(config(", \"use_rslora\": true").status().message(), HasSubstr("`use_rslora`"));
  EXPECT_THAT(config(", \"bias\": \"all\"").status().message(), HasSubstr("`bias`"));
  EXPECT_THAT(config(", \"rank_pattern\": {\"q_proj\": 8}").status().message(), HasSubstr("`rank_pattern`"));
  EXPECT_THAT(config(", \"layers_to_transform\": [0]").status().message(), HasSubstr("`layers_to_transform`"));
  dir.write("adapter_config.json", "{\"peft_type\": \"PREFIX_TUNING\"}");
  EXPECT_THAT(load_peft_adapter(dir.path(), model).status().message(), HasSubstr("LoRA adapters only"));
  EXPECT_THAT(config("").status().message(), HasSubstr("adapter_model.safetensors")) << "no weights file";
}

}  // namespace
}  // namespace rlrun::engine
