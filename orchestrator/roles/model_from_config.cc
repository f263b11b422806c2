#include "orchestrator/roles/model_from_config.h"

#include "engine/io/model_io.h"

namespace rlrun::orchestrator {

extern const std::string_view kBuiltinTokenizerJson;  // builtin_tokenizer.cc.in

engine::ModelConfig model_config_from(const ModelSection& model) {
  engine::ModelConfig m;
  m.architecture = std::string(enum_name(model.architecture));
  m.hidden_size = model.hidden_size;
  m.num_layers = model.num_layers;
  m.num_heads = model.num_heads;
  m.num_kv_heads = model.num_kv_heads;
  m.intermediate_size = model.intermediate_size;
  m.vocab_size = model.vocab_size;
  m.rope_theta = model.rope_theta;
  m.rms_norm_eps = model.rms_norm_eps;
  m.tie_embeddings = model.tie_embeddings;
  m.qkv_bias = model.qkv_bias;
  m.max_position = model.max_position;
  // bos/eos ids belong to the tokenizer; the engine fills them when it loads one.
  return m;
}

}  // namespace rlrun::orchestrator

namespace rlrun::orchestrator {

Result<engine::Tokenizer> tokenizer_from(const ModelSection& model) {
  if (!model.tokenizer.empty()) return engine::load_tokenizer_file(model.tokenizer);
  return engine::Tokenizer::from_json(kBuiltinTokenizerJson, "the built-in small tokenizer");
}

rollout::SchedulerOptions scheduler_options_from(const Config& c, const engine::Model& model) {
  rollout::SchedulerOptions o;
  o.max_num_seqs = c.max_num_seqs;
  o.max_model_len = c.max_model_len;
  o.kv_block_size = c.kv_block_size;
  o.kv_num_blocks = rollout::kv_blocks_for_budget(model, o, c.kv_cache_memory_mb << 20);
  return o;
}

}  // namespace rlrun::orchestrator
