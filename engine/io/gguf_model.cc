// A GGUF file's metadata as a ModelConfig (the tensors: gguf_model_tensors.cc).
#include "engine/io/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/observe/log.h"
#include "engine/io/gguf_dequant.h"
#include "engine/io/hf_config.h"

namespace rlrun::engine {
namespace {

constexpr const char* kArchitectures[] = {"llama", "qwen2", "qwen3", "gemma3"};

// ARCH.* keys rlrun reads (some only for some architectures, checked where read).
const std::set<std::string, std::less<>> kReadKeys = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "attention.key_length",
    "attention.value_length", "rope.freq_base", "rope.dimension_count", "vocab_size", "rope.scaling.type",
    "rope.scaling.factor", "rope.scale_linear", "rope.scaling.original_context_length",
    "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow", "rope.scaling.yarn_attn_factor",
    "attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa",
    "final_logit_softcapping", "attn_logit_softcapping", "expert_count", "expert_used_count",
};
// ARCH.* keys rlrun ignores, and why they cannot change what the model computes.
const std::map<std::string, std::string, std::less<>> kIgnoredKeys = {
    {"rope.scaling.finetuned", "whether the model was fine-tuned at the scaled length: informative"},
    {"tensor_data_layout", "the layout the converter started from; the file's layout follows from the architecture"},
};

// Typed access to ARCH.* keys; errors name the file and key.
class Metadata {
 public:
  Metadata(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const { return str(arch_, ".", suffix); }
  bool has(std::string_view suffix) const { return file_.find(key(suffix)) != nullptr; }
  Result<int64_t> integer(std::string_view suffix) const { return file_.get_int(key(suffix)); }
  Result<int64_t> integer(std::string_view suffix, int64_t dflt) const { return has(suffix) ? integer(suffix) : dflt; }
  Result<double> number(std::string_view suffix) const { return file_.get_float(key(suffix)); }
  Result<double> number(std::string_view suffix, double dflt) const { return has(suffix) ? number(suffix) : dflt; }
  Result<std::string> text(std::string_view suffix) const { return file_.get_string(key(suffix)); }
  int64_t tensor_count() const { return static_cast<int64_t>(file_.tensors().size()); }
  Status refuse(std::string_view suffix, const std::string& value, const std::string& why) const {
    return invalid_argument(str(file_.source(), ": ", key(suffix), " = ", value, ": ", why));
  }

 private:
  const GgufFile& file_;
  std::string arch_;
};

// Every ARCH.* key is one rlrun reads or knows to be harmless.
Status check_keys_known(const GgufFile& file, const std::string& arch) {
  const std::string prefix = arch + ".";
  for (const auto& [key, value] : file.metadata()) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string_view suffix = std::string_view(key).substr(prefix.size());
    if (kReadKeys.count(suffix) == 0 && kIgnoredKeys.count(suffix) == 0) {
      return invalid_argument(str(file.source(), ": metadata `", key, "` is not one rlrun reads; refusing the file ",
                                  "rather than ignoring what it may change (a newer llama.cpp feature?)"));
    }
  }
  return {};
}

// An optional token id key: -1 when absent.
Result<int64_t> token_id(const GgufFile& file, std::string_view key, int64_t vocab_size) {
  if (file.find(key) == nullptr) return int64_t{-1};
  RLRUN_ASSIGN_OR_RETURN(const int64_t id, file.get_int(key));
  if (id < 0 || id >= vocab_size) {
    return invalid_argument(str(file.source(), ": ", key, " = ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
  }
  return id;
}

Status read_shape(const Metadata& m, ModelConfig& c) {
  RLRUN_ASSIGN_OR_RETURN(c.hidden_size, m.integer("embedding_length"));
  RLRUN_ASSIGN_OR_RETURN(c.num_layers, m.integer("block_count"));
  RLRUN_ASSIGN_OR_RETURN(c.num_heads, m.integer("attention.head_count"));
  RLRUN_ASSIGN_OR_RETURN(c.num_kv_heads, m.integer("attention.head_count_kv", c.num_heads));  // llama.cpp's default
  RLRUN_ASSIGN_OR_RETURN(c.intermediate_size, m.integer("feed_forward_length"));
  RLRUN_ASSIGN_OR_RETURN(c.max_position, m.integer("context_length"));
  if (c.num_layers < 1 || c.num_layers > m.tensor_count()) {  // before a hostile count sizes anything
    return m.refuse("block_count", str(c.num_layers), str("the file has ", m.tensor_count(), " tensors"));
  }
  RLRUN_ASSIGN_OR_RETURN(c.rms_norm_eps, m.number("attention.layer_norm_rms_epsilon"));
  RLRUN_ASSIGN_OR_RETURN(c.rope_theta, m.number("rope.freq_base", 10000.0));  // llama.cpp's default
  if (m.has("attention.key_length")) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t k, m.integer("attention.key_length"));
    RLRUN_ASSIGN_OR_RETURN(const int64_t v, m.integer("attention.value_length", k));
    if (v != k) return m.refuse("attention.value_length", str(v), str("differs from attention.key_length ", k, " (not supported)"));
    if (k < 2 || k > (int64_t{1} << 16)) return m.refuse("attention.key_length", str(k), "not a head size");
    c.explicit_head_dim = k;
  }
  if (m.has("rope.dimension_count")) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t dims, m.integer("rope.dimension_count"));
    if (dims != c.head_dim()) {
      return m.refuse("rope.dimension_count", str(dims), str("head_dim is ", c.head_dim(), "; partial RoPE is not supported"));
    }
  }
  for (const char* k : {"expert_count", "expert_used_count"}) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t n, m.integer(k, 0));
    if (n != 0) return m.refuse(k, str(n), "mixture-of-experts models are not supported");
  }
  for (const char* k : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    RLRUN_ASSIGN_OR_RETURN(const double cap, m.number(k, 0.0));
    if (cap != 0.0) return m.refuse(k, str(cap), "logit soft-capping is not supported");
  }
  return {};
}

// llama.rope.scaling.* (llama.cpp's names for HF's rope_scaling): linear or yarn.
Status read_rope_scaling(const Metadata& m, ModelConfig& c) {
  std::string type = "none";
  if (m.has("rope.scaling.type")) {
    RLRUN_ASSIGN_OR_RETURN(type, m.text("rope.scaling.type"));
  } else if (m.has("rope.scale_linear")) {  // the key before rope.scaling.*
    type = "linear";
  }
  if (type == "none") return {};
  double factor = 1.0;
  if (m.has("rope.scaling.factor")) {
    RLRUN_ASSIGN_OR_RETURN(factor, m.number("rope.scaling.factor"));
  } else {
    RLRUN_ASSIGN_OR_RETURN(factor, m.number("rope.scale_linear", 1.0));
  }
  if (!(factor >= 1.0 && factor <= 1024.0)) return m.refuse("rope.scaling.factor", str(factor), "expected a factor in [1, 1024]");
  if (type == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = factor;
    return {};
  }
  if (type != "yarn") return m.refuse("rope.scaling.type", type, "only linear and yarn scaling (and Llama 3's rope_freqs) are supported");
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = factor;
  RLRUN_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position, m.integer("rope.scaling.original_context_length"));
  RLRUN_ASSIGN_OR_RETURN(c.rope_scaling.beta_fast, m.number("rope.scaling.yarn_beta_fast", 32.0));
  RLRUN_ASSIGN_OR_RETURN(c.rope_scaling.beta_slow, m.number("rope.scaling.yarn_beta_slow", 1.0));
  // HF's default attention factor when the file states none (modeling_rope_utils' get_mscale).
  RLRUN_ASSIGN_OR_RETURN(c.rope_scaling.attention_factor, m.number("rope.scaling.yarn_attn_factor", 0.1 * std::log(factor) + 1.0));
  if (c.rope_scaling.original_max_position < 1 || c.rope_scaling.original_max_position > c.max_position) {
    return m.refuse("rope.scaling.original_context_length", str(c.rope_scaling.original_max_position),
                    str("expected 1 to context_length ", c.max_position));
  }
  return {};
}

// The per-frequency divisors HF's rope_type "llama3" gives (modeling_rope_utils'
// _compute_llama3_parameters, as llama.cpp's converter writes them into rope_freqs.weight).
std::vector<double> llama3_divisors(const ModelConfig& c, const RopeScaling& s) {
  const int64_t d = c.head_dim();
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  std::vector<double> out;
  for (int64_t i = 0; i < d; i += 2) {
    const double wavelen = 2 * M_PI * std::pow(c.rope_theta, static_cast<double>(i) / d);
    if (wavelen < high_wavelen) {
      out.push_back(1.0);
    } else if (wavelen > low_wavelen) {
      out.push_back(s.factor);
    } else {
      const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      out.push_back(1.0 / ((1 - smooth) / s.factor + smooth));
    }
  }
  return out;
}

// rope_freqs.weight (head_dim / 2 divisors of RoPE's frequencies) back into Llama 3's rope_scaling.
// The divisors fix the factor and, through the smoothed band, low_freq_factor / (high - low) and
// original_max_position / (high - low) only: Llama 3.1-3.3's low 1, high 4, 8192 are tried first,
// then low 1 with what the band implies. The candidate must give every divisor within 1e-5.
Status read_rope_freqs(const GgufFile& file, ModelConfig& c) {
  Result<const GgufTensor*> t = file.find_tensor("rope_freqs.weight");
  if (!t.ok()) return {};
  const std::string where = str(file.source(), ": tensor `rope_freqs.weight`");
  if (c.architecture != "llama") return invalid_argument(str(where, ": per-frequency RoPE factors are read for llama files only"));
  if ((*t)->numel() != c.head_dim() / 2) {
    return invalid_argument(str(where, " has ", (*t)->numel(), " values; head_dim ", c.head_dim(), " needs ", c.head_dim() / 2));
  }
  if (c.rope_scaling.type != "default") return invalid_argument(str(where, ": beside rope.scaling.type ", c.rope_scaling.type));
  Result<std::vector<float>> values = dequantize_f32(**t);
  if (!values.ok()) return values.status().with_context(file.source());
  const std::vector<float>& r = *values;
  const double factor = *std::max_element(r.begin(), r.end());
  if (factor == 1.0 && std::all_of(r.begin(), r.end(), [](float v) { return v == 1.0f; })) return {};  // no scaling
  std::vector<RopeScaling> candidates;
  RopeScaling s;
  s.type = "llama3";
  s.factor = factor;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position = 8192;
  candidates.push_back(s);
  // Fit smooth = A / wavelen + B on the band's divisors: smooth = (1/r - 1/f) / (1 - 1/f).
  std::vector<std::pair<double, double>> band;  // (1 / wavelen, smooth)
  const int64_t d = c.head_dim();
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] > 1.0f + 1e-6f && r[i] < factor * (1 - 1e-6)) {
      const double wavelen = 2 * M_PI * std::pow(c.rope_theta, 2.0 * static_cast<double>(i) / d);
      band.emplace_back(1.0 / wavelen, (1.0 / r[i] - 1.0 / factor) / (1.0 - 1.0 / factor));
    }
  }
  if (band.size() >= 2) {
    const auto& [x0, y0] = band.front();
    const auto& [x1, y1] = band.back();
    const double a = (y1 - y0) / (x1 - x0), b = y0 - a * x0;
    if (b < 0 && a > 0) {  // low = 1: high - low = -1 / b, original = a * (high - low)
      s.high_freq_factor = 1.0 - 1.0 / b;
      s.original_max_position = std::llround(-a / b);
      candidates.push_back(s);
    }
  }
  for (const RopeScaling& candidate : candidates) {
    const std::vector<double> want = llama3_divisors(c, candidate);
    bool match = true;
    for (size_t i = 0; i < r.size() && match; ++i) match = std::abs(r[i] - want[i]) <= 1e-5 * want[i];
    if (match) {
      c.rope_scaling = candidate;
      return {};
    }
  }
  return invalid_argument(str(where, ": its ", r.size(), " divisors (largest ", factor,
                              ") are not Llama 3's RoPE scaling; other per-frequency factors are not supported"));
}

// Gemma 3's layer pattern, attention scale and RoPE base of sliding layers, as llama.cpp reads them.
Status read_gemma3(const GgufFile& file, const Metadata& m, ModelConfig& c) {
  c.qk_norm = true;
  c.hidden_act = "gelu_pytorch_tanh";
  c.norm_weight_offset = 1.0;
  c.sandwich_norms = true;
  c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));
  c.query_pre_attn_scalar = c.num_layers == 62 ? static_cast<double>(c.hidden_size / c.num_heads) : c.head_dim();
  RLRUN_ASSIGN_OR_RETURN(c.sliding_window, m.integer("attention.sliding_window", 0));
  if (c.sliding_window < 0) return m.refuse("attention.sliding_window", str(c.sliding_window), "must not be negative");
  if (c.sliding_window == 0) return {};
  std::vector<bool> sliding(c.num_layers);
  const GgufValue* pattern = file.find(m.key("attention.sliding_window_pattern"));
  if (pattern != nullptr && pattern->type == GgufValueType::kArray) {  // one flag a layer
    if (pattern->element_type != GgufValueType::kBool || pattern->count != static_cast<uint64_t>(c.num_layers)) {
      return m.refuse("attention.sliding_window_pattern", "an array", str("expected ", c.num_layers, " BOOLs"));
    }
    for (int64_t l = 0; l < c.num_layers; ++l) sliding[l] = pattern->bytes[l] != 0;
  } else {
    RLRUN_ASSIGN_OR_RETURN(const int64_t n, m.integer("attention.sliding_window_pattern", 6));
    if (n < 0) return m.refuse("attention.sliding_window_pattern", str(n), "must not be negative");
    for (int64_t l = 0; l < c.num_layers; ++l) sliding[l] = n == 0 || l % n < n - 1;  // hparams.set_swa_pattern
  }
  for (int64_t l = 0; l < c.num_layers; ++l) c.layer_types.push_back(sliding[l] ? "sliding_attention" : "full_attention");
  RLRUN_ASSIGN_OR_RETURN(c.rope_local_theta, m.number("rope.freq_base_swa", 10000.0));  // llama.cpp's default
  return {};
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

Result<ModelConfig> gguf_model_config(const GgufFile& file) {
  RLRUN_ASSIGN_OR_RETURN(const std::string arch, file.get_string("general.architecture"));
  if (std::find(std::begin(kArchitectures), std::end(kArchitectures), arch) == std::end(kArchitectures)) {
    return invalid_argument(str(file.source(), ": general.architecture = ", arch,
                                " is not supported (llama, qwen2, qwen3, gemma3)"));
  }
  RLRUN_RETURN_IF_ERROR(check_keys_known(file, arch));
  const Metadata m(file, arch);
  ModelConfig c;
  c.architecture = arch;
  RLRUN_RETURN_IF_ERROR(read_shape(m, c));
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  c.vocab_size = static_cast<int64_t>(tokens.size());
  if (m.has("vocab_size")) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t n, m.integer("vocab_size"));
    if (n != c.vocab_size) return m.refuse("vocab_size", str(n), str("tokenizer.ggml.tokens has ", c.vocab_size, " tokens"));
  }
  c.tie_embeddings = !file.find_tensor("output.weight").ok();
  c.torch_dtype = gguf_weight_types(file);  // what describe_model shows as the stored dtype
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  RLRUN_ASSIGN_OR_RETURN(c.bos_token_id, token_id(file, "tokenizer.ggml.bos_token_id", c.vocab_size));
  RLRUN_ASSIGN_OR_RETURN(c.eos_token_id, token_id(file, "tokenizer.ggml.eos_token_id", c.vocab_size));
  // llama.cpp ends generation at EOT and EOM too (Llama 3's <|eot_id|>, <|eom_id|>).
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t id, token_id(file, key, c.vocab_size));
    if (id >= 0 && id != c.eos_token_id &&
        std::find(c.extra_eos_token_ids.begin(), c.extra_eos_token_ids.end(), id) == c.extra_eos_token_ids.end()) {
      c.extra_eos_token_ids.push_back(id);
    }
  }
  if (arch != "gemma3" && (m.has("attention.sliding_window") || m.has("attention.sliding_window_pattern") ||
                           m.has("rope.freq_base_swa"))) {
    return m.refuse("attention.sliding_window", "(set)", str("sliding-window attention is read for gemma3 files only, not ", arch));
  }
  if (arch == "gemma3") RLRUN_RETURN_IF_ERROR(read_gemma3(file, m, c));
  RLRUN_RETURN_IF_ERROR(read_rope_scaling(m, c));
  Status valid = validate_model_config(c);
  if (!valid.ok()) return valid.with_context(file.source());
  RLRUN_RETURN_IF_ERROR(read_rope_freqs(file, c));
  return c;
}

std::string gguf_weight_types(const GgufFile& file) {
  // llama.cpp's LlamaFileType names (general.file_type), without MOSTLY_
  static const std::map<int64_t, const char*> kFileTypes = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},
      {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"},
      {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {21, "Q2_K_S"}, {32, "BF16"}};
  std::map<std::string, int> counts;
  for (const GgufTensor& t : file.tensors()) ++counts[ggml_type_name(static_cast<uint32_t>(t.type))];
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [type, n] : counts) by_count.emplace_back(-n, type);
  std::sort(by_count.begin(), by_count.end());
  std::string types;
  for (const auto& [n, type] : by_count) types += str(types.empty() ? "" : ", ", -n, " ", type);
  std::string name = "GGUF";
  if (Result<int64_t> ft = file.get_int("general.file_type"); ft.ok()) {
    auto it = kFileTypes.find(*ft);
    name = it != kFileTypes.end() ? it->second : str("file type ", *ft);
  }
  return str(name, " (", types, "), dequantized to fp32 on load");
}

Result<HfCheckpoint> load_gguf_checkpoint(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  HfCheckpoint checkpoint;
  RLRUN_ASSIGN_OR_RETURN(checkpoint.config, gguf_model_config(file));
  RLRUN_ASSIGN_OR_RETURN(checkpoint.tensors, gguf_model_tensors(file, checkpoint.config));
  return checkpoint;
}

}  // namespace rlrun::engine
