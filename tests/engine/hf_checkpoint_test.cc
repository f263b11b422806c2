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

#include "engine/bf16.h"
#include "common/log.h"
#include "engine/hf_checkpoint.h"

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

// C++ writes, transformers reads: from_pretrained must see exactly the parameters and logits.
TEST_P(HfReference, CheckpointWrittenByRlrunLoadsInTransformers) {
  Result<HfCheckpoint> original = load_hf_checkpoint(model_dir());
  ASSERT_TRUE(original.ok()) << original.status().to_string();
  std::string saved_args;
  for (auto [dtype, torch_dtype] : {std::pair{DType::kF32, "float32"}, std::pair{DType::kBF16, "bfloat16"}}) {
    const std::string saved = variant_dir() + "/rlrun_saved_" + torch_dtype;
    fs::remove_all(saved);
    ASSERT_TRUE(save_hf_checkpoint(saved, original->config, original->tensors, dtype).ok());
    saved_args += str(" ", saved, ":", torch_dtype);

    Result<HfCheckpoint> back = load_hf_checkpoint(saved);  // and rlrun reads its own output
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->tensors.size(), original->tensors.size());
    for (size_t i = 0; i < back->tensors.size(); ++i) {
      const HostTensor &a = original->tensors[i], &b = back->tensors[i];
      ASSERT_EQ(a.name, b.name);
      for (size_t k = 0; k < a.data.size(); ++k) {
        const float expected = dtype == DType::kF32 ? a.data[k] : bf16_to_f32(f32_to_bf16(a.data[k]));
        ASSERT_EQ(b.data[k], expected) << a.name << "[" << k << "]";
      }
    }
  }
  const auto [status, output] = run(str(RLRUN_PYREF_PYTHON, " ", RLRUN_SOURCE_DIR, "/tests/reference/hf_reference.py",
                                        " check-saved --ref ", variant_dir(), " --saved", saved_args));
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, ::testing::HasSubstr("float32, ")) << output;
  EXPECT_THAT(output, ::testing::HasSubstr("bfloat16, ")) << output;
}

INSTANTIATE_TEST_SUITE_P(Variants, HfReference, ::testing::Values("llama", "llama_tied", "qwen2"));

}  // namespace
}  // namespace rlrun::engine
