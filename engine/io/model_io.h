// model_io.h - a Model's weights to and from HF checkpoint directories (hf_checkpoint.h).
//
// The one bridge between the checkpoint format (HostTensor lists in hf_tensor_specs() order) and
// ModelWeights' flat buffers: tensors are matched BY NAME, so the two orders need not agree.
// Used by `rlrun generate`, the trainer's checkpoints and rollout workers' initial load.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/safetensors.h"
#include "engine/model/model.h"

namespace rlrun::engine {

// Copies `tensors` into the model's master weights and refreshes the compute copy. Exactly the
// model's parameters must be given (each name once, with its shape); errors name the tensor.
Status load_weights(Model& model, std::span<const HostTensor> tensors);
// load_hf_checkpoint_tensors(dir) into `model`; dir's config.json must describe the same shape.
Status load_weights(Model& model, const std::string& dir);

// The model's master weights as host tensors in hf_tensor_specs() order (what save_hf_checkpoint
// and weight sync take).
std::vector<HostTensor> weights_to_host(const Model& model);
// save_hf_checkpoint(dir, model.config(), weights_to_host(model), dtype); dtype F32 or BF16.
Status save_weights(const Model& model, const std::string& dir, DType dtype);

// Reads dir/config.json, creates the model on `backend` and loads its weights.
Result<std::unique_ptr<Model>> load_model(Backend& backend, const std::string& dir, ModelOptions options = {});

}  // namespace rlrun::engine
