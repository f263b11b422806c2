// Checks HF checkpoint IO against HF transformers itself: the fixture `hf_reference_setup` (see
// tests/reference/hf_reference.py for the file formats) saves tiny random Llama/Qwen2 models with
// save_pretrained; here rlrun loads them, and checkpoints rlrun writes are loaded back by
// transformers' from_pretrained and must give the same parameters and logits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/observe/log.h"
#include "engine/bf16.h"
#include "engine/io/hf_checkpoint.h"
#include "tests/engine/io/hf_reference.h"

namespace rlrun::engine {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kReferenceDir = RLRUN_HF_REFERENCE_DIR;

Json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path << " (the ctest fixture hf_reference_setup writes it)";
  return Json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Runs a command, returns (exit status, combined output).
std::pair<int, std::string> run(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  return {::pclose(pipe), output};
}

class HfReference : public ::testing::TestWithParam<std::string> {
 protected:
  std::string variant_dir() const { return kReferenceDir + "/" + GetParam(); }
  std::string model_dir() const { return variant_dir() + "/model"; }
};

TEST_P(HfReference, LoadsTheCheckpointTransformersSaved) {
  const Json inputs = read_json(variant_dir() + "/inputs.json");
  const Json reference = read_json(variant_dir() + "/reference.json");
  Result<HfCheckpoint> checkpoint = load_hf_checkpoint(model_dir());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const ModelConfig& c = checkpoint->config;
  EXPECT_EQ(c.architecture, inputs["arch"].get<std::string>());
  EXPECT_EQ(c.tie_embeddings, inputs["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c.qkv_bias, c.architecture == "qwen2");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.vocab_size, 96);
  EXPECT_EQ(c.max_position, 128);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.rope_theta, c.architecture == "qwen2" ? 1e6 : 1e4);
  EXPECT_EQ(c.rms_norm_eps, c.architecture == "qwen2" ? 1e-6 : 1e-5);

  // Same parameter set as torch's named_parameters(), same shapes and values.
  const Json& stats = reference["param_stats"];
  ASSERT_EQ(checkpoint->tensors.size(), stats.size());
  for (const HostTensor& t : checkpoint->tensors) {
    ASSERT_TRUE(stats.contains(t.name)) << t.name << " is not a parameter of the HF model";
    const Json& s = stats[t.name];
    EXPECT_EQ(t.shape, s["shape"].get<std::vector<int64_t>>()) << t.name;
    ASSERT_EQ(static_cast<int64_t>(t.data.size()), s["numel"].get<int64_t>()) << t.name;
    const std::vector<double> first = s["first"].get<std::vector<double>>();
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(t.data[i], static_cast<float>(first[i])) << t.name << "[" << i << "]";
    double sum = 0, abs_sum = 0;
    for (float v : t.data) {
      sum += v;
      abs_sum += std::fabs(v);
    }
    EXPECT_NEAR(sum, s["sum"].get<double>(), 1e-9 * abs_sum) << t.name;
    EXPECT_NEAR(abs_sum, s["abs_sum"].get<double>(), 1e-9 * abs_sum) << t.name;
  }
}

// grads and AdamW results are keyed by parameter name: the specs must name and shape them all.
TEST_P(HfReference, ReferenceFilesUseTheSpecNamesAndShapes) {
  Result<ModelConfig> config = read_hf_config(model_dir() + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const std::vector<TensorSpec> specs = hf_tensor_specs(*config);
  for (const char* file : {"grads.safetensors", "adamw_step3.safetensors"}) {
    Result<SafetensorsFile> f = SafetensorsFile::open(variant_dir() + "/" + file);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->tensors().size(), specs.size()) << file;
    for (const TensorSpec& spec : specs) {
      EXPECT_TRUE(f->read_f32(spec.name, spec.shape).ok()) << file << ": " << spec.name;
    }
  }
  const Json inputs = read_json(variant_dir() + "/inputs.json");
  Result<SafetensorsFile> outputs = SafetensorsFile::open(variant_dir() + "/outputs.safetensors");
  ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
  for (size_t s = 0; s < inputs["sequences"].size(); ++s) {
    const std::vector<int64_t> ids = inputs["sequences"][s].get<std::vector<int64_t>>();
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t logits_shape[] = {n, config->vocab_size}, logprobs_shape[] = {n - 1};
    EXPECT_TRUE(outputs->read_f32(str("logits.", s), logits_shape).ok());
    EXPECT_TRUE(outputs->read_f32(str("logprobs.", s), logprobs_shape).ok());
    Result<const TensorView*> id_view = outputs->find(str("input_ids.", s));
    ASSERT_TRUE(id_view.ok());
    ASSERT_EQ((*id_view)->dtype, DType::kI64);
    std::vector<int64_t> stored(static_cast<size_t>(n));
    ASSERT_EQ((*id_view)->bytes.size(), stored.size() * 8);
    std::memcpy(stored.data(), (*id_view)->bytes.data(), (*id_view)->bytes.size());
    EXPECT_EQ(stored, ids);
  }
}

// Writes `original` with save_hf_checkpoint in F32 and BF16 under `variant_dir`, checks that rlrun
// reads back the same values (bf16-rounded for BF16), and returns the `--check` arguments for
// hf_reference.py check-saved.
std::string save_and_reload(const std::string& variant_dir, const HfCheckpoint& original) {
  std::string check_args;
  for (auto [dtype, torch_dtype] : {std::pair{DType::kF32, "float32"}, std::pair{DType::kBF16, "bfloat16"}}) {
    const std::string saved = variant_dir + "/rlrun_saved_" + torch_dtype;
    fs::remove_all(saved);
    EXPECT_TRUE(save_hf_checkpoint(saved, original.config, original.tensors, dtype).ok());
    check_args += str(" --check ", variant_dir, " ", saved, " ", torch_dtype);

    Result<HfCheckpoint> back = load_hf_checkpoint(saved);
    EXPECT_TRUE(back.ok()) << back.status().to_string();
    if (!back.ok()) continue;
    EXPECT_EQ(back->tensors.size(), original.tensors.size());
    for (size_t i = 0; i < std::min(back->tensors.size(), original.tensors.size()); ++i) {
      const HostTensor &a = original.tensors[i], &b = back->tensors[i];
      EXPECT_EQ(a.name, b.name);
      std::vector<float> expected = a.data;
      if (dtype == DType::kBF16) {
        for (float& v : expected) v = bf16_to_f32(f32_to_bf16(v));
      }
      EXPECT_EQ(b.data, expected) << a.name;
    }
  }
  return check_args;
}

// C++ writes, transformers reads: from_pretrained must see exactly the parameters and logits.
// One Python process checks every variant (importing transformers costs seconds).
TEST(HfReferenceRoundTrip, CheckpointsWrittenByRlrunLoadInTransformers) {
  std::string check_args;
  for (const char* variant : {"llama", "llama_tied", "qwen2"}) {
    const std::string variant_dir = kReferenceDir + "/" + variant;
    Result<HfCheckpoint> original = load_hf_checkpoint(variant_dir + "/model");
    ASSERT_TRUE(original.ok()) << original.status().to_string();
    check_args += save_and_reload(variant_dir, *original);
  }
  const auto [status, output] = run(str(RLRUN_PYREF_PYTHON, " ", RLRUN_SOURCE_DIR,
                                        "/tests/reference/hf_reference.py check-saved", check_args));
  EXPECT_EQ(status, 0) << output;
  size_t ok_lines = 0;
  for (size_t pos = 0; (pos = output.find(": ok (", pos)) != std::string::npos; ++pos) ++ok_lines;
  EXPECT_EQ(ok_lines, 6u) << output;
}

// The reader the model tests use (hf_reference.h), and the reference's internal consistency:
// logprobs are log_softmax(logits) at the next token, and the loss is their negated mean.
TEST_P(HfReference, ReferenceOutputsAreConsistent) {
  Result<testing::HfReference> ref = testing::load_hf_reference(variant_dir());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_EQ(ref->sequences.size(), 2u);
  EXPECT_EQ(ref->adamw.steps, 3);
  ASSERT_EQ(ref->losses.size(), 4u);
  EXPECT_EQ(ref->losses[0], ref->loss);
  EXPECT_LT(ref->losses[3], ref->losses[0]);  // AdamW made progress on this loss
  const int64_t vocab = ref->model.config.vocab_size;
  double nll = 0;
  int64_t count = 0;
  for (size_t s = 0; s < ref->sequences.size(); ++s) {
    const std::vector<int32_t>& ids = ref->sequences[s];
    for (size_t t = 0; t + 1 < ids.size(); ++t) {
      const float* row = ref->logits[s].data() + t * vocab;
      double max = row[0], sum = 0;
      for (int64_t v = 0; v < vocab; ++v) max = std::max<double>(max, row[v]);
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
      const double logprob = row[ids[t + 1]] - max - std::log(sum);
      EXPECT_NEAR(ref->logprobs[s][t], logprob, 1e-5) << "sequence " << s << " token " << t;
      nll -= logprob;
      ++count;
    }
  }
  EXPECT_NEAR(nll / count, ref->loss, 1e-5);
  // AdamW moved every parameter that had a gradient
  for (size_t i = 0; i < ref->grads.size(); ++i) {
    EXPECT_NE(ref->adamw_step3[i].data, ref->model.tensors[i].data) << ref->grads[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, HfReference, ::testing::Values("llama", "llama_tied", "qwen2"));

}  // namespace
}  // namespace rlrun::engine
