// The architectures and config formats of issue 37 against HF transformers 5.x: the fixture
// `hf_arch_reference_setup` writes tiny random Qwen3, Llama 3.x (llama3, linear, dynamic, yarn
// RoPE), Qwen2 saved by transformers 5, and Gemma 3 models with their next-token log-probs, every
// parameter gradient and greedy ids (tests/reference/hf_arch_reference.py, build/pyref5). rlrun
// reads each config.json with its one reader, loads the weights and must reproduce them in fp32 on
// the CPU backend:
//   log-probs of the sequences packed in one row, and of answers that continue a shared system
//   prompt and question (prefix_of, the trainer's shared prompts), |a - b| / (1 + |b|) <= 1e-5;
//   every gradient, max |a - b| over a tensor <= 1e-4 * max |b| of that tensor (+ 1e-7);
//   greedy ids of each prompt through the paged KV cache (block size 4), equal.
// Each check prints its largest difference (the closing figures of issue 37).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/observe/log.h"
#include "engine/backend.h"
#include "engine/io/model_io.h"
#include "engine/io/safetensors.h"
#include "engine/model/model.h"

namespace rlrun::engine {
namespace {

constexpr double kLogprobTol = 1e-5;
constexpr double kGradTol = 1e-4;

std::string variant_dir(const std::string& variant) { return std::string(RLRUN_HF_ARCH_REFERENCE_DIR) + "/" + variant; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path << " (written by the ctest fixture hf_arch_reference_setup)";
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

struct HostBatch {
  std::vector<int32_t> tokens, positions, cu_seqlens{0}, targets, prefix_of;
  // One segment: `ids` at positions from `start`, each targeting the next id of `ids`, the last
  // one `last_target`.
  void add(const std::vector<int32_t>& ids, int32_t start = 0, int32_t last_target = -1, int32_t prefix = -1) {
    for (size_t t = 0; t < ids.size(); ++t) {
      tokens.push_back(ids[t]);
      positions.push_back(start + static_cast<int32_t>(t));
      targets.push_back(t + 1 < ids.size() ? ids[t + 1] : last_target);
    }
    cu_seqlens.push_back(static_cast<int32_t>(tokens.size()));
    prefix_of.push_back(prefix);
  }
  PackedBatch batch() const { return {tokens, positions, cu_seqlens, targets, prefix_of}; }
};

class HfArch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    inputs_ = read_json(variant_dir(GetParam()) + "/inputs.json");
    ASSERT_TRUE(inputs_.is_object());
    auto backend = create_backend("cpu", 1);
    ASSERT_TRUE(backend.ok()) << backend.status().to_string();
    backend_ = std::move(backend).value();
    auto model = load_model(*backend_, variant_dir(GetParam()) + "/model");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(model).value();
    auto outputs = SafetensorsFile::open(variant_dir(GetParam()) + "/outputs.safetensors");
    ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
    outputs_ = std::make_unique<SafetensorsFile>(std::move(outputs).value());
  }
  void report(const std::string& what, const Diff& d) const {
    std::printf("[hf_arch] %-14s %-44s max abs diff %.3g  max rel diff %.3g  (ref max |x| %.3g)\n",
                GetParam().c_str(), what.c_str(), d.max_abs, d.max_rel, d.ref_scale);
  }
  std::vector<float> reference(const std::string& name, int64_t n) {
    const int64_t shape[] = {n};
    auto v = outputs_->read_f32(name, shape);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    return v.ok() ? *v : std::vector<float>{};
  }
  std::vector<std::vector<int32_t>> sequences() const {
    return inputs_["sequences"].get<std::vector<std::vector<int32_t>>>();
  }
  // Log-probs of the rows of `hb` that have a target, in order.
  std::vector<float> logprobs_of(const HostBatch& hb) {
    auto out = model_->forward(hb.batch(), /*for_backward=*/false);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) return {};
    const std::vector<float> lp = to_host_f32(out->logprobs);
    std::vector<float> kept;
    for (size_t i = 0; i < lp.size(); ++i)
      if (hb.targets[i] >= 0) kept.push_back(lp[i]);
    return kept;
  }

  nlohmann::json inputs_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SafetensorsFile> outputs_;
};

TEST_P(HfArch, PackedLogprobsMatchTransformers) {
  HostBatch packed;
  std::vector<float> want;
  const auto seqs = sequences();
  for (size_t s = 0; s < seqs.size(); ++s) {
    packed.add(seqs[s]);
    const std::vector<float> lp = reference(str("logprobs.", s), static_cast<int64_t>(seqs[s].size()) - 1);
    want.insert(want.end(), lp.begin(), lp.end());
  }
  const Diff d = compare(logprobs_of(packed), want);
  report("logprobs, packed row", d);
  EXPECT_LE(d.max_rel, kLogprobTol);
}

// A system prompt, a question continuing it, and answers each continuing the question (the
// trainer's shared prompt and common prompt start: PackedBatch::prefix_of), beside a plain
// sequence. Each answer's predictions are those of the whole sequence in transformers.
TEST_P(HfArch, SharedPromptLogprobsMatchTransformers) {
  const nlohmann::json& shared = inputs_["shared"];
  const auto system = shared["system"].get<std::vector<int32_t>>();
  const auto question = shared["question"].get<std::vector<int32_t>>();
  const auto answers = shared["answers"].get<std::vector<std::vector<int32_t>>>();
  HostBatch hb;
  hb.add(sequences()[1]);
  const int32_t ns = static_cast<int32_t>(system.size()), nq = static_cast<int32_t>(question.size());
  hb.add(system, 0, question[0]);
  hb.add(question, ns, -1, 1);
  for (const auto& a : answers) hb.add(a, ns + nq, -1, 2);
  std::vector<float> got = logprobs_of(hb), want;
  got.erase(got.begin(), got.begin() + static_cast<int64_t>(sequences()[1].size()) - 1);  // the plain one
  for (size_t k = 0; k < answers.size(); ++k) {
    const int64_t n = ns + nq + static_cast<int64_t>(answers[k].size());
    const std::vector<float> lp = reference(str("shared_logprobs.", k), n - 1);
    if (k == 0) want.insert(want.end(), lp.begin(), lp.begin() + ns + nq - 1);  // system's, question's
    want.insert(want.end(), lp.begin() + ns + nq, lp.end());                    // the answer's own
  }
  const Diff d = compare(got, want);
  report("logprobs, shared prompt chain", d);
  EXPECT_LE(d.max_rel, kLogprobTol);
}

TEST_P(HfArch, GradientsMatchTransformers) {
  HostBatch hb;
  for (const auto& ids : sequences()) hb.add(ids);
  model_->weights().zero_grads();
  auto nll = mean_nll_backward(*model_, hb.batch());
  ASSERT_TRUE(nll.ok()) << nll.status().to_string();
  auto grads = SafetensorsFile::open(variant_dir(GetParam()) + "/grads.safetensors");
  ASSERT_TRUE(grads.ok()) << grads.status().to_string();
  Diff worst;
  double worst_ratio = 0;
  const ModelWeights& w = model_->weights();
  for (size_t i = 0; i < w.params().size(); ++i) {
    const ParamInfo& p = w.params()[i];
    const std::vector<int64_t> shape(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    auto want = grads->read_f32(p.name, shape);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    const Diff d = compare(to_host_f32(w.grad(i)), *want);
    EXPECT_LE(d.max_abs, kGradTol * d.ref_scale + 1e-7) << p.name;
    worst_ratio = std::max(worst_ratio, d.max_abs / (d.ref_scale + 1e-12));
    worst.max_abs = std::max(worst.max_abs, d.max_abs);
    worst.ref_scale = std::max(worst.ref_scale, d.ref_scale);
  }
  report(str("every gradient (worst diff / tensor max ", worst_ratio, ")"), worst);
}

// Greedy decoding over the paged KV cache: the whole prompt prefilled, then one token at a time.
TEST_P(HfArch, GreedyIdsMatchTransformers) {
  const auto prompts = inputs_["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto want = read_json(variant_dir(GetParam()) + "/greedy.json")["ids"].get<std::vector<std::vector<int32_t>>>();
  const int64_t max_new = inputs_["max_new_tokens"].get<int64_t>();
  for (size_t p = 0; p < prompts.size(); ++p) {
    auto cache = KvCache::create(*backend_, KvCacheConfig::for_model(model_->config(), 4, 16));
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    ASSERT_TRUE((*cache)->add_sequence(3).ok());
    const SeqId seqs[] = {3};
    const int32_t cu[] = {0, static_cast<int32_t>(prompts[p].size())};
    auto logits = model_->forward_cached(**cache, seqs, prompts[p], cu);
    std::vector<int32_t> got;
    for (int64_t t = 0; t < max_new; ++t) {
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      const std::vector<float> row = to_host_f32(*logits);
      const int32_t next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      got.push_back(next);
      const int32_t tok[] = {next};
      if (t + 1 < max_new) logits = model_->decode(**cache, seqs, tok);
    }
    EXPECT_EQ(got, want[p]) << "prompt " << p;
    std::printf("[hf_arch] %-14s greedy ids, prompt %zu (%zu tokens): %s\n", GetParam().c_str(), p,
                prompts[p].size(), got == want[p] ? "equal" : "DIFFER");
  }
}

// `rlrun generate --temperature 0` (the rollout workers' sampler and KV path in one process): its
// ids are transformers' greedy ids, up to the first eos it stops at (the reference does not stop).
TEST_P(HfArch, GenerateCliIsGreedyTransformers) {
  const auto prompts = inputs_["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto want = read_json(variant_dir(GetParam()) + "/greedy.json")["ids"].get<std::vector<std::vector<int32_t>>>();
  const ModelConfig& c = model_->config();
  std::vector<int64_t> eos = c.extra_eos_token_ids;
  eos.push_back(c.eos_token_id);
  const std::string out = ::testing::TempDir() + "hf_arch_generate_" + GetParam() + ".json";
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::string ids;
    for (int32_t id : prompts[p]) {
      if (!ids.empty()) ids += ',';
      ids += std::to_string(id);
    }
    const std::string command = str("'", RLRUN_BINARY, "' generate --checkpoint '", variant_dir(GetParam()),
                                    "/model' --prompt-ids ", ids, " --max-tokens ", want[p].size(),
                                    " --temperature 0 --json > '", out, "'");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const std::vector<int32_t> got = read_json(out)["ids"].get<std::vector<int32_t>>();
    ASSERT_FALSE(got.empty());
    ASSERT_LE(got.size(), want[p].size());
    EXPECT_EQ(got, std::vector<int32_t>(want[p].begin(), want[p].begin() + static_cast<int64_t>(got.size())))
        << "prompt " << p;
    if (got.size() < want[p].size()) {
      EXPECT_NE(std::find(eos.begin(), eos.end(), got.back()), eos.end());
    }
  }
  std::filesystem::remove(out);
}

// The export (a checkpoint, the end of a run, save_weights) is the same model to transformers 5
// (hf_arch_reference.py check-export: config, RoPE, parameters, log-probs) and, for Llama and
// Qwen2 (default, linear, dynamic and llama3 RoPE), to transformers 4.46 (its log-probs equal the
// 5.x reference).
TEST_P(HfArch, ExportIsTheSameModelToTransformers5) {
  const std::string dir = ::testing::TempDir() + "hf_arch_export_" + GetParam();
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(save_weights(*model_, dir, DType::kF32).ok());
  const std::string command = str("'", RLRUN_PYREF5_PYTHON, "' '", RLRUN_SOURCE_DIR,
                                  "/tests/reference/hf_arch_reference.py' check-export --variant '",
                                  variant_dir(GetParam()), "' --export '", dir, "' 2>&1");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  // Classes transformers 4.46 has; not yarn, which 4.46 computes as another model from the same
  // config (its correction range comes from max_position_embeddings; 5.x, vLLM and rlrun use
  // original_max_position_embeddings: docs/models.md).
  if (GetParam().rfind("gemma3", 0) != 0 && GetParam() != "qwen3" && GetParam() != "llama_yarn") {
    const std::string v4 = str("'", RLRUN_PYREF_PYTHON, "' '", RLRUN_SOURCE_DIR,
                               "/tests/reference/hf_arch_reference.py' check-export --logprobs-only --variant '",
                               variant_dir(GetParam()), "' --export '", dir, "' 2>&1");
    EXPECT_EQ(std::system(v4.c_str()), 0) << v4;
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfArch,
                         ::testing::Values("qwen2_v5", "qwen3", "llama3", "llama_linear", "llama_dynamic", "llama_yarn",
                                           "gemma3_global", "gemma3", "gemma3_local"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace rlrun::engine
