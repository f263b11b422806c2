#include "orchestrator/roles/model_from_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/file_io.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_model.h"
#include "engine/io/model_io.h"
#include "orchestrator/data/prompt_format.h"
#include "rollout/generate.h"

namespace rlrun::orchestrator {

extern const std::string_view kBuiltinTokenizerJson;  // builtin_tokenizer.cc.in

Result<engine::ModelConfig> model_config_from(const ModelSection& model) {
  // A checkpoint's model is what the engine's reader makes of it, all of it (head_dim, RoPE
  // scaling, Gemma's layers...), not only the shape keys the config section holds.
  if (!model.checkpoint.empty()) return engine::read_checkpoint_config(model.checkpoint);
  engine::ModelConfig m = engine::architecture_config(std::string(enum_name(model.architecture)));
  m.hidden_size = model.hidden_size;
  m.num_layers = model.num_layers;
  m.num_heads = model.num_heads;
  m.num_kv_heads = model.num_kv_heads;
  m.intermediate_size = model.intermediate_size;
  m.vocab_size = model.vocab_size;
  m.rope_theta = model.rope_theta;
  m.rope_local_theta = 0;  // a config-written gemma3 has global layers only
  m.rms_norm_eps = model.rms_norm_eps;
  m.tie_embeddings = model.tie_embeddings;
  m.qkv_bias = model.qkv_bias;
  m.max_position = model.max_position;
  if (m.architecture == "gemma3") m.embedding_scale = std::sqrt(static_cast<double>(m.hidden_size));
  // bos/eos ids belong to the tokenizer; the engine fills them when it loads one.
  return m;
}

Result<engine::LoraConfig> lora_config_from(const Config& config) {
  engine::LoraConfig lc;
  lc.rank = config.lora_rank;
  lc.alpha = config.lora_alpha;
  RLRUN_ASSIGN_OR_RETURN(lc.targets, engine::parse_lora_targets(config.lora_target_modules));
  return lc;
}

int64_t lora_elements(const Config& config, const engine::ModelConfig& model) {
  if (config.lora_rank == 0) return 0;
  const Result<engine::LoraConfig> lora = lora_config_from(config);
  if (!lora.ok()) return 0;
  const std::vector<engine::ParamInfo> layout = engine::lora_layout(model, *lora);
  return layout.empty() ? 0 : engine::flat_parameter_count(layout);
}

Result<std::unique_ptr<engine::LoraWeights>> lora_from_config(const Config& config, engine::Backend& backend,
                                                              const engine::ModelConfig& model) {
  if (config.lora_rank == 0) return std::unique_ptr<engine::LoraWeights>();
  RLRUN_ASSIGN_OR_RETURN(const engine::LoraConfig lc, lora_config_from(config));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<engine::LoraWeights> lora, engine::LoraWeights::create(backend, model, lc));
  lora->init(static_cast<uint64_t>(config.seed));  // the trainer and every rollout worker alike
  return lora;
}

}  // namespace rlrun::orchestrator

namespace rlrun::orchestrator {

Result<engine::Tokenizer> tokenizer_from(const ModelSection& model) {
  if (!model.tokenizer.empty()) return engine::load_tokenizer_file(model.tokenizer);
  return engine::Tokenizer::from_json(kBuiltinTokenizerJson, "the built-in small tokenizer");
}

std::vector<int32_t> run_stop_token_ids(const Config& config, const engine::Tokenizer& tokenizer,
                                        std::optional<int32_t> end_of_turn) {
  const Result<engine::ModelConfig> model = model_config_from(config.model);
  return rollout::stop_token_ids(model.ok() ? *model : engine::ModelConfig{}, &tokenizer, end_of_turn);
}

rollout::SchedulerOptions scheduler_options_from(const Config& c, const engine::Model& model) {
  rollout::SchedulerOptions o;
  o.max_num_seqs = c.max_num_seqs;
  o.max_model_len = c.max_model_len;
  o.kv_block_size = c.kv_block_size;
  if (c.max_prefill_tokens > 0) o.max_prefill_tokens = c.max_prefill_tokens;  // 0: the worker plans it
  o.kv_num_blocks = rollout::kv_blocks_for_budget(model, o, c.kv_cache_memory_mb << 20);
  return o;
}

namespace {

// The model's own tokenizer_config.json as JSON (an object; empty without one).
Result<nlohmann::ordered_json> source_tokenizer_config(const std::string& tokenizer_path) {
  if (tokenizer_path.empty()) return nlohmann::ordered_json::object();
  if (engine::is_gguf_path(tokenizer_path)) {
    RLRUN_ASSIGN_OR_RETURN(engine::GgufFile file, engine::GgufFile::open(tokenizer_path));
    RLRUN_ASSIGN_OR_RETURN(const engine::ModelConfig config, engine::gguf_model_config(file));
    RLRUN_ASSIGN_OR_RETURN(const std::string text, engine::gguf_tokenizer_config_json(file, config));
    return nlohmann::ordered_json::parse(text);
  }
  const std::filesystem::path path = std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return nlohmann::ordered_json::object();
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(path.string(), "the tokenizer config"));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument(str(path.string(), ": not a JSON object"));
  return j;
}

}  // namespace

Status write_tokenizer_files(const Config& config, const engine::ModelConfig& model, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string& source = config.model.tokenizer;
  std::string tokenizer_json;
  if (source.empty()) {
    tokenizer_json = std::string(kBuiltinTokenizerJson);
  } else if (engine::is_gguf_path(source)) {
    RLRUN_ASSIGN_OR_RETURN(engine::GgufFile file, engine::GgufFile::open(source));
    RLRUN_ASSIGN_OR_RETURN(tokenizer_json, engine::gguf_tokenizer_json(file));
  } else {
    RLRUN_ASSIGN_OR_RETURN(tokenizer_json, read_file(source, "model.tokenizer"));
  }
  RLRUN_ASSIGN_OR_RETURN(nlohmann::ordered_json tokenizer_config, source_tokenizer_config(source));
  if (!tokenizer_config.contains("tokenizer_class")) tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast";
  const std::string& choice = config.task.chat_template;
  if (choice != "auto" && choice != "none") {  // the template the run trained with
    RLRUN_ASSIGN_OR_RETURN(tokenizer_config["chat_template"], read_file(choice, "task.chat_template"));
  }
  engine::ModelConfig ids = model;  // bos/eos come with a pretrained checkpoint
  if (!config.model.checkpoint.empty()) {
    RLRUN_ASSIGN_OR_RETURN(ids, engine::read_checkpoint_config(config.model.checkpoint));
  }
  nlohmann::ordered_json generation;
  if (ids.bos_token_id >= 0) generation["bos_token_id"] = ids.bos_token_id;
  std::vector<int64_t> eos;
  if (ids.eos_token_id >= 0) eos.push_back(ids.eos_token_id);
  RLRUN_ASSIGN_OR_RETURN(engine::Tokenizer tokenizer, tokenizer_from(config.model));
  RLRUN_ASSIGN_OR_RETURN(const PromptFormat format, PromptFormat::create(choice, source, tokenizer));
  if (format.end_of_turn() && std::find(eos.begin(), eos.end(), *format.end_of_turn()) == eos.end())
    eos.push_back(*format.end_of_turn());  // answers end there: HF's generate stops there too
  if (eos.size() == 1) generation["eos_token_id"] = eos[0];
  if (eos.size() > 1) generation["eos_token_id"] = eos;
  const fs::path out(dir);
  RLRUN_RETURN_IF_ERROR(write_file_atomic((out / "tokenizer.json").string(), tokenizer_json));
  RLRUN_RETURN_IF_ERROR(write_file_atomic((out / "tokenizer_config.json").string(), tokenizer_config.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"));
  return write_file_atomic((out / "generation_config.json").string(), generation.dump(2) + "\n");
}

}  // namespace rlrun::orchestrator
