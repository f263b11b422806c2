// model_io.h - a Model's weights to and from checkpoints: HF folders (hf_checkpoint.h), and for
// loading also GGUF files (a path ending in .gguf: gguf_model.h).
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
#include "engine/tokenizer/tokenizer.h"

namespace rlrun::engine {

// Copies `tensors` into the model's master weights and refreshes the compute copy. Exactly the
// model's parameters must be given (each name once, with its shape); errors name the tensor.
Status load_weights(Model& model, std::span<const HostTensor> tensors);
// The checkpoint's tensors into `model`: load_hf_checkpoint_tensors of a folder, whose
// config.json must describe the same shape, or gguf_model_tensors of a .gguf file.
Status load_weights(Model& model, const std::string& checkpoint);

// The model of a checkpoint: a folder's config.json (parse_hf_config, the one reader, which
// refuses what the engine would compute wrongly) or a .gguf file's metadata.
Result<ModelConfig> read_checkpoint_config(const std::string& checkpoint);
// read_checkpoint_config as config.json text (hf_config_json): what load_config() reads for
// model.checkpoint (common/config/config.h set_checkpoint_reader), so `rlrun CONFIG` and its
// workers get the same verdict as generate, serve and convert.
Result<std::string> checkpoint_config_json(const std::string& checkpoint);

// A tokenizer.json, or the tokenizer in a .gguf file's metadata.
Result<Tokenizer> load_tokenizer_file(const std::string& path);
// Where a checkpoint's tokenizer is: DIR/tokenizer.json, or the .gguf file itself.
std::string checkpoint_tokenizer_path(const std::string& checkpoint);

// The model's master weights as host tensors in hf_tensor_specs() order (what save_hf_checkpoint
// takes); after ModelWeights::release_master() its compute weights, widened to f32 (bf16 values:
// the f32 master then lives sharded in the trainer's optimizer and its checkpoints). With
// kBf16Cache (compute_dtype: bf16 on a CPU) the matrices are the bf16 copy the products read, the
// norms and biases the master: the model as it computed.
std::vector<HostTensor> weights_to_host(const Model& model);
// save_hf_checkpoint(dir, model.config(), weights_to_host(model), dtype); dtype F32 or BF16.
Status save_weights(const Model& model, const std::string& dir, DType dtype);

// Reads the checkpoint (a folder or a .gguf file), creates the model on `backend` and loads its
// weights.
Result<std::unique_ptr<Model>> load_model(Backend& backend, const std::string& checkpoint, ModelOptions options = {});

}  // namespace rlrun::engine
