// hf_checkpoint.h - load and save HF checkpoint directories (config.json + safetensors).
//
// A directory holds `config.json` and either `model.safetensors` or shards listed in
// `model.safetensors.index.json` ({"weight_map": {"tensor name": "shard file name"}}). Tensors are
// exchanged as fp32 host arrays in hf_tensor_specs() order; the model, the trainer's checkpoints
// and weight sync all use that list.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/hf_config.h"
#include "engine/io/safetensors.h"
#include "engine/model/config.h"

namespace rlrun::engine {

// Reads the safetensors file(s) of an HF checkpoint directory and returns every tensor of
// hf_tensor_specs(config), in that order, as fp32 (F32/BF16/F16 sources). Errors name the file
// and tensor for: a missing tensor, a wrong shape, a non-float dtype, or an unexpected tensor
// (another architecture's checkpoint). Ignored: `*.rotary_emb.inv_freq` buffers and a
// `lm_head.weight` stored although the embeddings are tied.
Result<std::vector<HostTensor>> load_hf_checkpoint_tensors(const std::string& dir, const ModelConfig& config);

struct HfCheckpoint {
  ModelConfig config;
  std::vector<HostTensor> tensors;  // hf_tensor_specs(config) order
};
// read_hf_config(dir/config.json), then load_hf_checkpoint_tensors.
Result<HfCheckpoint> load_hf_checkpoint(const std::string& dir);

// Writes dir/model.safetensors, then dir/config.json, each atomically (the directory is created if
// missing). Each file is whole after a crash, but a crash between the two can pair new weights with
// an old config.json: a caller that needs the directory as a unit writes a fresh directory and
// renames it into place (as the trainer's step checkpoints should). `tensors` must be exactly hf_tensor_specs(config) by name and shape, in any order.
// dtype: F32 or BF16. The files load with transformers' from_pretrained.
Status save_hf_checkpoint(const std::string& dir, const ModelConfig& config,
                          std::span<const HostTensor> tensors, DType dtype);

}  // namespace rlrun::engine
