// peft_adapter.h - LoRA adapters as a PEFT adapter folder, both ways.
//
// The folder HF `peft` writes and reads (PeftModel.from_pretrained(base, dir)):
//   adapter_config.json         {"peft_type": "LORA", "r", "lora_alpha", "target_modules", ...}
//   adapter_model.safetensors   base_model.model.model.layers.{i}.<module>.lora_A.weight (r, in)
//                               and .lora_B.weight (out, r), fp32
// with PEFT's defaults for everything rlrun does not use (no dropout at inference, no bias, no
// rsLoRA, no DoRA): a config asking for any of those is refused on reading, naming the field.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/safetensors.h"
#include "engine/model/config.h"
#include "engine/model/lora.h"

namespace rlrun::engine {

// adapter_config.json text. `base_model`: what base_model_name_or_path names (a folder or file).
std::string peft_adapter_config_json(const LoraConfig& config, const std::string& base_model);

// Writes the folder `dir` (created if missing; each file atomically): the config and `tensors`,
// which must be lora_layout(model, config)'s tensors by name and shape.
Status save_peft_adapter(const std::string& dir, const ModelConfig& model, const LoraConfig& config,
                         const std::vector<HostTensor>& tensors, const std::string& base_model);

struct PeftAdapter {
  LoraConfig config;
  std::vector<HostTensor> tensors;  // lora_layout order
};
// Reads a PEFT LoRA folder for a model of `model`'s shape. Errors name the file and the field or
// tensor: not LoRA, a setting rlrun does not compute (use_rslora, use_dora, bias, fan_in_fan_out,
// layers_to_transform, rank_pattern/alpha_pattern, modules_to_save), an unknown target, a missing or
// misshapen tensor.
Result<PeftAdapter> load_peft_adapter(const std::string& dir, const ModelConfig& model);

}  // namespace rlrun::engine
