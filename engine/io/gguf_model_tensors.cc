// A GGUF file's tensors in HF's names and layout (the config: gguf_model.cc).
#include <map>

#include "common/observe/log.h"
#include "engine/io/gguf_dequant.h"
#include "engine/io/gguf_model.h"
#include "engine/io/hf_config.h"

namespace rlrun::engine {
namespace {

// llama.cpp's per-layer tensor names -> HF's (after "model.layers.N."). ffn_norm is the norm
// before the MLP: HF's post_attention_layernorm in Llama/Qwen, pre_feedforward_layernorm in Gemma 3,
// whose post_attention_layernorm is the norm of the attention output (GGUF post_attention_norm).
const std::map<std::string, std::string, std::less<>> kLayerNames = {
    {"attn_norm", "input_layernorm"},       {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},         {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},         {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},          {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};
const std::map<std::string, std::string, std::less<>> kGemma3LayerNames = {
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};

// The HF name of a llama.cpp tensor name, or "" when it has none.
std::string hf_name(const std::string& name, const std::string& arch) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  // blk.N.PART.SUFFIX
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t a = name.find('.', 4), b = a == std::string::npos ? a : name.find('.', a + 1);
  if (b == std::string::npos) return "";
  const std::string_view part = std::string_view(name).substr(a + 1, b - a - 1);
  const std::string* hf = nullptr;
  if (auto it = kGemma3LayerNames.find(part); arch == "gemma3" && it != kGemma3LayerNames.end()) hf = &it->second;
  if (auto it = kLayerNames.find(part); hf == nullptr && it != kLayerNames.end()) hf = &it->second;
  if (hf == nullptr) return "";
  return str("model.layers.", name.substr(4, a - 4), ".", *hf, name.substr(b));
}

// Undoes llama.cpp's permute of Q/K rows (LlamaModel.permute in its converter): within each head of
// 2*half rows, the file holds row (i, j) = 2*i + j where HF holds j*half + i (i < half, j < 2).
// w: (rows, cols) row-major; a bias is (rows, 1).
std::vector<float> unpermute_rows(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t n_heads) {
  std::vector<float> out(w.size());
  const int64_t half = rows / n_heads / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const float* src = w.data() + (h * 2 * half + 2 * i + j) * cols;
        std::copy(src, src + cols, out.data() + (h * 2 * half + j * half + i) * cols);
      }
    }
  }
  return out;
}

// A tensor the file may carry that is no HF parameter: read into the config instead.
bool is_config_tensor(const std::string& name) { return name == "rope_freqs.weight"; }

}  // namespace

Status for_each_gguf_tensor(const GgufFile& file, const ModelConfig& config,
                            const std::function<Status(HostTensor&&)>& take) {
  const std::vector<TensorSpec> specs = hf_tensor_specs(config);
  std::map<std::string, size_t> position;  // HF name -> index in specs
  for (size_t i = 0; i < specs.size(); ++i) position[specs[i].name] = i;
  std::vector<bool> seen(specs.size());
  for (const GgufTensor& t : file.tensors()) {
    if (is_config_tensor(t.name)) continue;
    const std::string name = hf_name(t.name, config.architecture);
    auto it = position.find(name);
    if (it == position.end()) {
      return invalid_argument(str(file.source(), ": tensor `", t.name, "` is not part of a ", config.architecture,
                                  " model with ", config.num_layers, " layers"));
    }
    const TensorSpec& spec = specs[it->second];
    if (t.shape() != spec.shape) {
      return invalid_argument(str(file.source(), ": tensor `", t.name, "` has shape ", shape_string(t.shape()),
                                  "; the config gives ", spec.name, " the shape ", shape_string(spec.shape)));
    }
    if (seen[it->second]) return invalid_argument(str(file.source(), ": two tensors map to ", spec.name));
    seen[it->second] = true;
    Result<std::vector<float>> values = dequantize_f32(t);
    if (!values.ok()) return values.status().with_context(file.source());
    HostTensor h{spec.name, spec.shape, std::move(*values)};
    // llama.cpp permutes Q/K for its llama architecture only (qwen2, qwen3 and gemma3 keep HF's order).
    const bool q = t.name.find(".attn_q.") != std::string::npos, k = t.name.find(".attn_k.") != std::string::npos;
    if (config.architecture == "llama" && (q || k)) {
      const int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
      h.data = unpermute_rows(h.data, spec.shape[0], cols, q ? config.num_heads : config.num_kv_heads);
    }
    // Gemma 3's norms are stored as 1 + w (llama.cpp's converter adds the offset HF's norm applies);
    // w_file - 1 in fp32, as transformers' GGUF loader computes it.
    if (config.architecture == "gemma3" && t.name.ends_with("norm.weight")) {
      for (float& v : h.data) v = v - 1.0f;
    }
    RLRUN_RETURN_IF_ERROR(take(std::move(h)));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!seen[i]) return not_found(str(file.source(), ": no tensor for ", specs[i].name));
  }
  return {};
}

Result<std::vector<HostTensor>> gguf_model_tensors(const GgufFile& file, const ModelConfig& config) {
  const std::vector<TensorSpec> specs = hf_tensor_specs(config);
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < specs.size(); ++i) position[specs[i].name] = i;
  std::vector<HostTensor> out(specs.size());
  RLRUN_RETURN_IF_ERROR(for_each_gguf_tensor(file, config, [&](HostTensor&& t) {
    out[position.at(t.name)] = std::move(t);
    return Status();
  }));
  return out;
}

}  // namespace rlrun::engine
