#include "engine/io/gguf_model.h"

#include <map>
#include <nlohmann/json.hpp>

#include "common/observe/log.h"
#include "engine/io/gguf_dequant.h"
#include "engine/io/hf_config.h"

namespace rlrun::engine {
namespace {

using Json = nlohmann::ordered_json;

// llama.cpp's per-layer tensor names -> HF's (after "model.layers.N.").
const std::map<std::string, std::string, std::less<>> kLayerNames = {
    {"attn_norm", "input_layernorm"},   {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},     {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},     {"attn_output", "self_attn.o_proj"},
    {"ffn_gate", "mlp.gate_proj"},      {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

// The HF name of a llama.cpp tensor name, or "" when it has none.
std::string hf_name(const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  // blk.N.PART.SUFFIX
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t a = name.find('.', 4), b = a == std::string::npos ? a : name.find('.', a + 1);
  if (b == std::string::npos) return "";
  auto it = kLayerNames.find(std::string_view(name).substr(a + 1, b - a - 1));
  if (it == kLayerNames.end()) return "";
  return str("model.layers.", name.substr(4, a - 4), ".", it->second, name.substr(b));
}

// Undoes llama.cpp's permute of Q/K rows: within each head of 2*half rows, the file holds row
// (i, j) = 2*i + j where HF holds j*half + i (i < half, j < 2). w: (rows, cols) row-major.
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

Status check_llama_keys(const GgufFile& file, const ModelConfig& c) {
  if (const GgufValue* v = file.find("llama.rope.scaling.type"); v != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(const std::string type, file.get_string("llama.rope.scaling.type"));
    if (type != "none") {
      return invalid_argument(str(file.source(), ": llama.rope.scaling.type = ", type, " is not supported (plain RoPE only)"));
    }
  }
  if (file.find("llama.rope.dimension_count") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t dims, file.get_int("llama.rope.dimension_count"));
    if (dims != c.head_dim()) {
      return invalid_argument(str(file.source(), ": llama.rope.dimension_count = ", dims,
                                  " but head_dim is ", c.head_dim(), "; partial RoPE is not supported"));
    }
  }
  if (file.find("llama.vocab_size") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t n, file.get_int("llama.vocab_size"));
    if (n != c.vocab_size) {
      return invalid_argument(str(file.source(), ": llama.vocab_size = ", n, " but tokenizer.ggml.tokens has ",
                                  c.vocab_size, " tokens"));
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

}  // namespace

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

Result<ModelConfig> gguf_model_config(const GgufFile& file) {
  RLRUN_ASSIGN_OR_RETURN(const std::string arch, file.get_string("general.architecture"));
  if (arch != "llama") {
    return invalid_argument(str(file.source(), ": general.architecture = ", arch, "; only llama is supported"));
  }
  ModelConfig c;
  c.architecture = "llama";
  RLRUN_ASSIGN_OR_RETURN(c.hidden_size, file.get_int("llama.embedding_length"));
  RLRUN_ASSIGN_OR_RETURN(c.num_layers, file.get_int("llama.block_count"));
  RLRUN_ASSIGN_OR_RETURN(c.num_heads, file.get_int("llama.attention.head_count"));
  RLRUN_ASSIGN_OR_RETURN(c.num_kv_heads, file.get_int("llama.attention.head_count_kv"));
  RLRUN_ASSIGN_OR_RETURN(c.intermediate_size, file.get_int("llama.feed_forward_length"));
  RLRUN_ASSIGN_OR_RETURN(c.max_position, file.get_int("llama.context_length"));
  RLRUN_ASSIGN_OR_RETURN(c.rms_norm_eps, file.get_float("llama.attention.layer_norm_rms_epsilon"));
  c.rope_theta = 10000.0;  // llama.cpp's default when the key is absent
  if (file.find("llama.rope.freq_base") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(c.rope_theta, file.get_float("llama.rope.freq_base"));
  }
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  c.vocab_size = static_cast<int64_t>(tokens.size());
  c.tie_embeddings = !file.find_tensor("output.weight").ok();
  c.qkv_bias = false;
  RLRUN_ASSIGN_OR_RETURN(c.bos_token_id, token_id(file, "tokenizer.ggml.bos_token_id", c.vocab_size));
  RLRUN_ASSIGN_OR_RETURN(c.eos_token_id, token_id(file, "tokenizer.ggml.eos_token_id", c.vocab_size));
  Status valid = validate_model_config(c);
  if (!valid.ok()) return valid.with_context(file.source());
  RLRUN_RETURN_IF_ERROR(check_llama_keys(file, c));
  return c;
}

Result<std::vector<HostTensor>> gguf_model_tensors(const GgufFile& file, const ModelConfig& config) {
  const std::vector<TensorSpec> specs = hf_tensor_specs(config);
  std::map<std::string, size_t> position;  // HF name -> index in specs
  for (size_t i = 0; i < specs.size(); ++i) position[specs[i].name] = i;
  std::vector<HostTensor> out(specs.size());
  for (const GgufTensor& t : file.tensors()) {
    const std::string name = hf_name(t.name);
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
    HostTensor& h = out[it->second];
    if (!h.name.empty()) return invalid_argument(str(file.source(), ": two tensors map to ", spec.name));
    Result<std::vector<float>> values = dequantize_f32(t);
    if (!values.ok()) return values.status().with_context(file.source());
    h = {spec.name, spec.shape, std::move(*values)};
    const bool q = name.ends_with("q_proj.weight"), k = name.ends_with("k_proj.weight");
    if (q || k) h.data = unpermute_rows(h.data, spec.shape[0], spec.shape[1], q ? config.num_heads : config.num_kv_heads);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (out[i].name.empty()) return not_found(str(file.source(), ": no tensor for ", specs[i].name));
  }
  return out;
}

Result<HfCheckpoint> load_gguf_checkpoint(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  HfCheckpoint checkpoint;
  RLRUN_ASSIGN_OR_RETURN(checkpoint.config, gguf_model_config(file));
  RLRUN_ASSIGN_OR_RETURN(checkpoint.tensors, gguf_model_tensors(file, checkpoint.config));
  return checkpoint;
}

// ---------------------------------------------------------------- tokenizer

Result<std::string> gguf_tokenizer_json(const GgufFile& file) {
  RLRUN_ASSIGN_OR_RETURN(const std::string model, file.get_string("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return invalid_argument(str(file.source(), ": tokenizer.ggml.model = ", model,
                                "; only gpt2 (byte-level BPE) tokenizers are supported"));
  }
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> merges, file.get_strings("tokenizer.ggml.merges"));
  std::vector<int64_t> types(tokens.size(), 1);  // 1: normal
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(types, file.get_ints("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return invalid_argument(str(file.source(), ": tokenizer.ggml.token_type has ", types.size(),
                                  " entries for ", tokens.size(), " tokens"));
    }
  }
  std::string pre = "default";
  if (file.find("tokenizer.ggml.pre") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(pre, file.get_string("tokenizer.ggml.pre"));
  }
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  Json pre_tokenizer;
  if (pre == "smollm") {
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers", Json::array({Json{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  } else if (pre == "default" || pre == "gpt2") {
    pre_tokenizer = byte_level;
  } else {
    return invalid_argument(str(file.source(), ": tokenizer.ggml.pre = ", pre, " is not supported (smollm, gpt2, default)"));
  }
  Json added = Json::array(), vocab = Json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string token(tokens[i]);
    if (types[i] == 3 || types[i] == 4) {  // control, user-defined
      added.push_back({{"id", i}, {"content", token}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", types[i] == 3}});
    }
    vocab[token] = i;
  }
  Json merge_list = Json::array();
  for (std::string_view m : merges) merge_list.push_back(std::string(m));
  const Json j = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      {"normalizer", nullptr}, {"pre_tokenizer", pre_tokenizer},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"ignore_merges", false}, {"vocab", vocab}, {"merges", merge_list}}},
  };
  try {
    return j.dump();
  } catch (const nlohmann::json::exception&) {
    return invalid_argument(str(file.source(), ": a token or merge in tokenizer.ggml.* is not valid UTF-8"));
  }
}

Result<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  RLRUN_ASSIGN_OR_RETURN(const std::string json, gguf_tokenizer_json(file));
  return Tokenizer::from_json(json, path);
}

Result<std::string> gguf_tokenizer_config_json(const GgufFile& file, const ModelConfig& config) {
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";  // tokenizer.json as is; not model_type's LlamaTokenizer
  constexpr std::pair<const char*, const char*> kSpecial[] = {{"tokenizer.ggml.bos_token_id", "bos_token"},
                                                              {"tokenizer.ggml.eos_token_id", "eos_token"},
                                                              {"tokenizer.ggml.unknown_token_id", "unk_token"},
                                                              {"tokenizer.ggml.padding_token_id", "pad_token"}};
  for (const auto& [key, name] : kSpecial) {
    if (file.find(key) == nullptr) continue;
    RLRUN_ASSIGN_OR_RETURN(const int64_t id, file.get_int(key));
    if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
      return invalid_argument(str(file.source(), ": ", key, " = ", id, " is not a token id"));
    }
    j[name] = std::string(tokens[id]);
  }
  if (file.find("tokenizer.chat_template") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(const std::string chat_template, file.get_string("tokenizer.chat_template"));
    j["chat_template"] = chat_template;
  }
  j["model_max_length"] = config.max_position;
  j["clean_up_tokenization_spaces"] = false;
  try {
    return j.dump(2) + "\n";
  } catch (const nlohmann::json::exception&) {
    return invalid_argument(str(file.source(), ": a special token or the chat template is not valid UTF-8"));
  }
}

}  // namespace rlrun::engine
