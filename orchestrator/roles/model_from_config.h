// model_from_config.h - the config as the parts a role builds: the engine's ModelConfig, the
// tokenizer, a rollout worker's scheduler (whose KV pool `rlrun plan` predicts).
//
// Lives in the orchestrator because common (the config) must not depend on engine. With
// model.checkpoint set, load_config() has already filled the shape keys through the same reader.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/config/config.h"
#include "engine/model/config.h"
#include "engine/model/lora.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/scheduler.h"

namespace rlrun::orchestrator {

// The engine's model of the config: the checkpoint's (engine::read_checkpoint_config, the one
// reader) when model.checkpoint is set, else the shape keys with the architecture's fixed math.
Result<engine::ModelConfig> model_config_from(const ModelSection& model);

// The run's LoRA settings (lora_rank, lora_alpha, lora_target_modules; rank 0: none).
// invalid_argument naming lora_target_modules for an unknown module.
Result<engine::LoraConfig> lora_config_from(const Config& config);
// Elements of the run's adapters' flat f32 buffer on a model of `model`'s shape (alignment
// padding included): what a LoRA weight sync moves / 4. 0 when lora_rank is 0 (or the targets
// do not parse: the processes report that).
int64_t lora_elements(const Config& config, const engine::ModelConfig& model);
// The run's low-rank adapters for a model of `model`'s shape, initialised from the run's seed as
// PEFT does (B = 0: the base model); null when lora_rank is 0.
Result<std::unique_ptr<engine::LoraWeights>> lora_from_config(const Config& config, engine::Backend& backend,
                                                              const engine::ModelConfig& model);

// The run's tokenizer: model.tokenizer (load_config() defaults it to the checkpoint's
// tokenizer.json, or to a .gguf checkpoint itself), else the built-in small tokenizer compiled into rlrun.
Result<engine::Tokenizer> tokenizer_from(const ModelSection& model);

// Beside an exported model's config.json and model.safetensors, what makes it a folder other tools
// load and serve: tokenizer.json (model.tokenizer as JSON: a copy, the .gguf's, or the built-in
// one), tokenizer_config.json (the model's, or the .gguf's, with task.chat_template's template when
// that names a file) and generation_config.json (the bos/eos ids, and the end of turn of the
// template the run used). Written atomically into `dir`.
Status write_tokenizer_files(const Config& config, const engine::ModelConfig& model, const std::string& dir);

// The tokens that end the policy's answers in a run (the requests' stop_token_ids): the one list
// rollout::stop_token_ids makes for `rlrun generate` and `rlrun serve` too, of the run's model
// (model_config_from; a model that cannot be read adds no eos ids), `tokenizer` and the prompt
// format's `end_of_turn`.
std::vector<int32_t> run_stop_token_ids(const Config& config, const engine::Tokenizer& tokenizer,
                                        std::optional<int32_t> end_of_turn);

// A rollout worker's scheduler: max_num_seqs, max_model_len, kv_block_size, and a KV pool of
// kv_cache_memory_mb (0: max_num_seqs sequences of max_model_len), as plan/memory_plan.h plans it.
rollout::SchedulerOptions scheduler_options_from(const Config& config, const engine::Model& model);

// Whether the rollout workers keep the KL reference and score the groups kept for training
// (kl_reference_on: rollout with a KL term; rollout/kl_reference.h), so the trainer need not.
inline bool rollout_scores_kl_reference(const Config& config) {
  return config.kl_coef > 0 && config.kl_reference_on == KlReferenceOn::kRollout;
}

}  // namespace rlrun::orchestrator
