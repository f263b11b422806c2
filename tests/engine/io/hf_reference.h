// hf_reference.h - reads one variant written by tests/reference/hf_reference.py (test support).
//
// The fixture `hf_reference_setup` writes RLRUN_HF_REFERENCE_DIR/{llama,llama_tied,qwen2}; a test
// binary that needs them sets RLRUN_TEST_PROPERTIES_<stem> FIXTURES_REQUIRED hf_reference and the
// RLRUN_HF_REFERENCE_DIR compile definition (see tests/engine/CMakeLists.txt). File formats: the
// docstring of hf_reference.py.
#pragma once

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/observe/log.h"
#include "common/status.h"
#include "engine/io/hf_checkpoint.h"

namespace rlrun::engine::testing {

struct HfAdamW {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int steps = 0;
};

struct HfReference {
  std::string dir;
  HfCheckpoint model;                             // the initial parameters, hf_tensor_specs order
  std::vector<std::vector<int32_t>> sequences;    // token ids; position ids are 0..T-1
  std::vector<std::vector<float>> logits;         // per sequence (T, vocab), row-major
  std::vector<std::vector<float>> logprobs;       // per sequence (T-1): log p(ids[t+1] | ids[<=t])
  double loss = 0;                                // mean next-token NLL over both sequences
  std::vector<double> losses;                     // before AdamW steps 1..3, and after step 3
  std::vector<HostTensor> grads;                  // d loss / d param, hf_tensor_specs order
  std::vector<HostTensor> adamw_step3;            // params after 3 AdamW steps, same order
  HfAdamW adamw;
};

inline Result<nlohmann::json> read_reference_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(str("missing ", path, " (written by the ctest fixture hf_reference_setup)"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(str(path, ": invalid JSON"));
  return j;
}

// Every tensor of `specs` from a safetensors file, fp32, in spec order.
inline Result<std::vector<HostTensor>> read_spec_tensors(const std::string& path, const std::vector<TensorSpec>& specs) {
  RLRUN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  std::vector<HostTensor> out;
  for (const TensorSpec& spec : specs) {
    RLRUN_ASSIGN_OR_RETURN(std::vector<float> data, file.read_f32(spec.name, spec.shape));
    out.push_back({spec.name, spec.shape, std::move(data)});
  }
  return out;
}

// `variant_dir` is RLRUN_HF_REFERENCE_DIR "/llama" (or llama_tied, qwen2).
inline Result<HfReference> load_hf_reference(const std::string& variant_dir) {
  HfReference ref;
  ref.dir = variant_dir;
  RLRUN_ASSIGN_OR_RETURN(ref.model, load_hf_checkpoint(variant_dir + "/model"));
  RLRUN_ASSIGN_OR_RETURN(nlohmann::json inputs, read_reference_json(variant_dir + "/inputs.json"));
  RLRUN_ASSIGN_OR_RETURN(nlohmann::json scalars, read_reference_json(variant_dir + "/reference.json"));
  ref.sequences = inputs["sequences"].get<std::vector<std::vector<int32_t>>>();
  const nlohmann::json& a = inputs["adamw"];
  ref.adamw = {a["lr"].get<double>(), a["beta1"].get<double>(), a["beta2"].get<double>(),
               a["eps"].get<double>(), a["weight_decay"].get<double>(), a["steps"].get<int>()};
  ref.loss = scalars["loss"].get<double>();
  ref.losses = scalars["losses"].get<std::vector<double>>();

  RLRUN_ASSIGN_OR_RETURN(SafetensorsFile outputs, SafetensorsFile::open(variant_dir + "/outputs.safetensors"));
  for (size_t s = 0; s < ref.sequences.size(); ++s) {
    const int64_t n = static_cast<int64_t>(ref.sequences[s].size());
    const int64_t logits_shape[] = {n, ref.model.config.vocab_size}, logprobs_shape[] = {n - 1};
    RLRUN_ASSIGN_OR_RETURN(std::vector<float> logits, outputs.read_f32(str("logits.", s), logits_shape));
    RLRUN_ASSIGN_OR_RETURN(std::vector<float> logprobs, outputs.read_f32(str("logprobs.", s), logprobs_shape));
    ref.logits.push_back(std::move(logits));
    ref.logprobs.push_back(std::move(logprobs));
  }
  const std::vector<TensorSpec> specs = hf_tensor_specs(ref.model.config);
  RLRUN_ASSIGN_OR_RETURN(ref.grads, read_spec_tensors(variant_dir + "/grads.safetensors", specs));
  RLRUN_ASSIGN_OR_RETURN(ref.adamw_step3, read_spec_tensors(variant_dir + "/adamw_step3.safetensors", specs));
  return ref;
}

}  // namespace rlrun::engine::testing
