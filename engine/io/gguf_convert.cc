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
  RLRUN_ASSIGN_OR_RETURN(const std::string tokenizer_config, gguf_tokenizer_config_json(file, config));
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
