#include "engine/io/gguf_convert.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/observe/log.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_model.h"

namespace rlrun::engine {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// tokenizer_config.json: the special tokens by content, the chat template, the context length.
Result<std::string> tokenizer_config_json(const GgufFile& file, const ModelConfig& config) {
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  Json j;
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

std::string generation_config_json(const ModelConfig& config) {
  Json j;
  if (config.bos_token_id >= 0) j["bos_token_id"] = config.bos_token_id;
  if (config.eos_token_id >= 0) j["eos_token_id"] = config.eos_token_id;
  return j.dump(2) + "\n";
}

}  // namespace

Status convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir) {
  RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(gguf_path));
  RLRUN_ASSIGN_OR_RETURN(const ModelConfig config, gguf_model_config(file));
  RLRUN_ASSIGN_OR_RETURN(const std::string tokenizer, gguf_tokenizer_json(file));
  RLRUN_ASSIGN_OR_RETURN(const std::string tokenizer_config, tokenizer_config_json(file, config));
  {
    RLRUN_ASSIGN_OR_RETURN(const std::vector<HostTensor> tensors, gguf_model_tensors(file, config));
    RLRUN_RETURN_IF_ERROR(save_hf_checkpoint(out_dir, config, tensors, DType::kF32));
  }
  const fs::path dir(out_dir);
  RLRUN_RETURN_IF_ERROR(write_file_atomic((dir / "tokenizer.json").string(), tokenizer));
  RLRUN_RETURN_IF_ERROR(write_file_atomic((dir / "tokenizer_config.json").string(), tokenizer_config));
  return write_file_atomic((dir / "generation_config.json").string(), generation_config_json(config));
}

}  // namespace rlrun::engine
