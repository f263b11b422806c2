// LoRA against HF peft: the fixture `peft_reference_setup` writes tiny random Qwen2 (every linear
// layer, r 4) and Llama (q, v, down, r 8) bases with PEFT adapters whose A and B are both random,
// their log-probs, every adapter gradient and greedy ids (tests/reference/peft_reference.py,
// build/pyref5). rlrun reads the adapter folder (engine/io/peft_adapter.h), attaches it to the
// base and must reproduce, in fp32 on the CPU backend:
//   log-probs of the sequences packed in one row, |a - b| / (1 + |b|) <= 1e-5;
//   every adapter gradient, max |a - b| over a tensor <= 1e-4 * max |b| of that tensor (+ 1e-7),
//   with the base frozen (no base gradient buffer);
//   greedy ids through the paged KV cache with the low-rank path, equal.
// And the other way: the export of a LoRA run (trainer/hf_export.h) is a merged HF folder whose
// greedy ids (in process and from `rlrun generate`) are peft's, plus an adapter folder that PeftModel.from_pretrained loads onto the base
// and that generates the same ids (peft_reference.py check-adapter).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/observe/log.h"
#include "engine/io/model_io.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/safetensors.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "trainer/hf_export.h"

namespace rlrun::engine {
namespace {

constexpr double kLogprobTol = 1e-5;
constexpr double kGradTol = 1e-4;

std::string variant_dir(const std::string& v) { return std::string(RLRUN_PEFT_REFERENCE_DIR) + "/" + v; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path << " (written by the ctest fixture peft_reference_setup)";
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

struct Diff {
  double max_abs = 0, max_rel = 0, ref_scale = 0;
};

Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  Diff d;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double abs = std::fabs(double{got[i]} - want[i]);
    d.max_abs = std::max(d.max_abs, std::isnan(abs) ? INFINITY : abs);
    d.max_rel = std::max(d.max_rel, std::isnan(abs) ? INFINITY : abs / (1.0 + std::fabs(want[i])));
    d.ref_scale = std::max(d.ref_scale, std::fabs(double{want[i]}));
  }
  return d;
}

// Greedy decoding over the paged KV cache (block size 4): the prompt prefilled, then one token at a time.
std::vector<int32_t> greedy(Backend& backend, Model& model, const std::vector<int32_t>& prompt, int64_t max_new) {
  auto cache = KvCache::create(backend, KvCacheConfig::for_model(model.config(), 4, 16));
  EXPECT_TRUE(cache.ok());
  EXPECT_TRUE((*cache)->add_sequence(3).ok());
  const SeqId seqs[] = {3};
  const int32_t cu[] = {0, static_cast<int32_t>(prompt.size())};
  auto logits = model.forward_cached(**cache, seqs, prompt, cu);
  std::vector<int32_t> got;
  for (int64_t t = 0; t < max_new && logits.ok(); ++t) {
    const std::vector<float> row = to_host_f32(*logits);
    got.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
    const int32_t tok[] = {got.back()};
    if (t + 1 < max_new) logits = model.decode(**cache, seqs, tok);
  }
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  return got;
}

class PeftReference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    inputs_ = read_json(variant_dir(GetParam()) + "/inputs.json");
    ASSERT_TRUE(inputs_.is_object());
    auto backend = create_backend("cpu", 1);
    ASSERT_TRUE(backend.ok());
    backend_ = std::move(backend).value();
    auto model = load_model(*backend_, variant_dir(GetParam()) + "/model");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(model).value();
    auto adapter = load_peft_adapter(variant_dir(GetParam()) + "/adapter", model_->config());
    ASSERT_TRUE(adapter.ok()) << adapter.status().to_string();
    auto lora = LoraWeights::create(*backend_, model_->config(), adapter->config);
    ASSERT_TRUE(lora.ok()) << lora.status().to_string();
    lora_ = std::move(lora).value();
    for (size_t i = 0; i < lora_->params().size(); ++i) {
      const ParamInfo& p = lora_->params()[i];
      ASSERT_EQ(adapter->tensors[i].name, p.name);
      backend_->copy_from_host(lora_->master_flat().rows(p.offset, p.offset + p.numel), adapter->tensors[i].data.data(),
                               static_cast<size_t>(p.numel) * sizeof(float));
    }
    ASSERT_TRUE(model_->attach_lora(lora_.get()).ok());
    model_->weights().release_grads();  // the base is frozen
  }
  void report(const std::string& what, const Diff& d) const {
    std::printf("[peft] %-6s %-40s max abs diff %.3g  max rel diff %.3g  (ref max |x| %.3g)\n", GetParam().c_str(),
                what.c_str(), d.max_abs, d.max_rel, d.ref_scale);
  }
  std::vector<std::vector<int32_t>> ids_of(const char* key) const {
    return inputs_[key].get<std::vector<std::vector<int32_t>>>();
  }
  // The sequences packed in one row, each predicting its next ids.
  void pack(std::vector<int32_t>& tokens, std::vector<int32_t>& positions, std::vector<int32_t>& cu,
            std::vector<int32_t>& targets) const {
    cu = {0};
    for (const auto& ids : ids_of("sequences")) {
      for (size_t t = 0; t < ids.size(); ++t) {
        tokens.push_back(ids[t]);
        positions.push_back(static_cast<int32_t>(t));
        targets.push_back(t + 1 < ids.size() ? ids[t + 1] : -1);
      }
      cu.push_back(static_cast<int32_t>(tokens.size()));
    }
  }

  nlohmann::json inputs_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<LoraWeights> lora_;
};

TEST_P(PeftReference, PackedLogprobsAndAdapterGradientsMatchPeft) {
  std::vector<int32_t> tokens, positions, cu, targets;
  pack(tokens, positions, cu, targets);
  const PackedBatch batch{tokens, positions, cu, targets};
  auto out = model_->forward(batch, false);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const std::vector<float> lp = to_host_f32(out->logprobs);
  auto outputs = SafetensorsFile::open(variant_dir(GetParam()) + "/outputs.safetensors");
  ASSERT_TRUE(outputs.ok());
  std::vector<float> got, want;
  const auto seqs = ids_of("sequences");
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t n = static_cast<int64_t>(seqs[s].size()) - 1, shape[] = {n};
    auto ref = outputs->read_f32(str("logprobs.", s), shape);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    want.insert(want.end(), ref->begin(), ref->end());
    got.insert(got.end(), lp.begin() + cu[s], lp.begin() + cu[s] + n);
  }
  const Diff d = compare(got, want);
  report("logprobs, packed row", d);
  EXPECT_LE(d.max_rel, kLogprobTol);

  lora_->zero_grads();
  ASSERT_TRUE(mean_nll_backward(*model_, batch).ok());
  EXPECT_FALSE(model_->weights().has_grads());
  auto grads = SafetensorsFile::open(variant_dir(GetParam()) + "/grads.safetensors");
  ASSERT_TRUE(grads.ok());
  const std::vector<float> flat = to_host_f32(lora_->grad_flat());
  Diff worst;
  double worst_ratio = 0;
  for (const ParamInfo& p : lora_->params()) {
    const std::vector<int64_t> shape(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    auto ref = grads->read_f32(p.name, shape);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    const Diff g = compare({flat.begin() + p.offset, flat.begin() + p.offset + p.numel}, *ref);
    EXPECT_LE(g.max_abs, kGradTol * g.ref_scale + 1e-7) << p.name;
    EXPECT_GT(g.ref_scale, 0.0) << p.name;
    worst_ratio = std::max(worst_ratio, g.max_abs / (g.ref_scale + 1e-12));
    worst.max_abs = std::max(worst.max_abs, g.max_abs);
    worst.ref_scale = std::max(worst.ref_scale, g.ref_scale);
  }
  report(str("adapter gradients (", lora_->params().size(), ", worst diff / tensor max ", worst_ratio, ")"), worst);
}

TEST_P(PeftReference, GreedyIdsMatchPeftWithTheLowRankPath) {
  const auto prompts = ids_of("prompts");
  const auto want = read_json(variant_dir(GetParam()) + "/greedy.json")["ids"].get<std::vector<std::vector<int32_t>>>();
  for (size_t p = 0; p < prompts.size(); ++p)
    EXPECT_EQ(greedy(*backend_, *model_, prompts[p], static_cast<int64_t>(want[p].size())), want[p]) << "prompt " << p;
}

// The export: merged weights in the HF folder (loaded back without adapters, they decode peft's
// ids), the adapters in dir/adapter (peft loads them onto the base and decodes the same ids).
TEST_P(PeftReference, TheExportIsMergedAndItsAdapterFolderLoadsInPeft) {
  namespace fs = std::filesystem;
  const std::string dir = ::testing::TempDir() + "lora_export_" + GetParam();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<float> base_before = to_host_f32(model_->weights().master_flat());
  ASSERT_TRUE(trainer::hf_model_exporter(*model_, DType::kF32, variant_dir(GetParam()) + "/model")(dir).ok());
  EXPECT_EQ(to_host_f32(model_->weights().master_flat()), base_before) << "the base is restored bit for bit";
  ASSERT_TRUE(fs::exists(dir + "/adapter/adapter_config.json"));
  ASSERT_TRUE(fs::exists(dir + "/adapter/adapter_model.safetensors"));

  auto merged = load_model(*backend_, dir);
  ASSERT_TRUE(merged.ok()) << merged.status().to_string();
  const auto prompts = ids_of("prompts");
  const auto want = read_json(variant_dir(GetParam()) + "/greedy.json")["ids"].get<std::vector<std::vector<int32_t>>>();
  nlohmann::json ids = nlohmann::json::array();
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<int32_t> got = greedy(*backend_, **merged, prompts[p], static_cast<int64_t>(want[p].size()));
    EXPECT_EQ(got, want[p]) << "merged model, prompt " << p;
    ids.push_back(got);
  }
  // `rlrun generate --temperature 0` on the merged export: peft's ids, up to the eos it stops at.
  const std::string out = dir + "/generate.json";
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::string list;
    for (int32_t id : prompts[p]) {
      if (!list.empty()) list += ',';
      list += std::to_string(id);
    }
    const std::string command = str("'", RLRUN_BINARY, "' generate --checkpoint '", dir, "' --prompt-ids ", list,
                                    " --max-tokens ", want[p].size(), " --temperature 0 --json > '", out, "'");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const std::vector<int32_t> got = read_json(out)["ids"].get<std::vector<int32_t>>();
    ASSERT_FALSE(got.empty());
    ASSERT_LE(got.size(), want[p].size());
    EXPECT_EQ(got, std::vector<int32_t>(want[p].begin(), want[p].begin() + static_cast<int64_t>(got.size())))
        << "rlrun generate, prompt " << p;
    if (got.size() < want[p].size()) {
      EXPECT_EQ(got.back(), merged->get()->config().eos_token_id);
    }
  }
  const std::string ids_path = dir + "/rlrun_greedy.json";
  std::ofstream(ids_path) << nlohmann::json{{"ids", ids}}.dump();
  const std::string command = str("'", RLRUN_PYREF5_PYTHON, "' '", RLRUN_SOURCE_DIR,
                                  "/tests/reference/peft_reference.py' check-adapter --variant '", variant_dir(GetParam()),
                                  "' --adapter '", dir, "/adapter' --ids '", ids_path, "'");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Variants, PeftReference, ::testing::Values("qwen2", "llama"));

}  // namespace
}  // namespace rlrun::engine
