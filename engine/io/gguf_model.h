// gguf_model.h - a GGUF model file as what an HF folder gives: ModelConfig, the weights in HF
// naming, and the tokenizer (gguf_tokenizer.h).
//
// Architectures (general.architecture), read as llama.cpp reads them and as transformers names
// them:
//   llama   Llama 2/3.x, SmolLM2. Q/K rows are put back in HF's order: llama.cpp's converter
//           interleaves the two halves of each head's rotary dimensions for this architecture only.
//           RoPE scaling: llama.rope.scaling.type linear or yarn, or Llama 3.1's band (a
//           rope_freqs.weight tensor of per-frequency divisors, read back into rope_type llama3).
//   qwen2   Qwen2/2.5: q/k/v biases.
//   qwen3   Qwen3 (dense): per-head QK-norm, head_dim from attention.key_length.
//   gemma3  Gemma 3 text: GeGLU (tanh GELU), (1 + w) RMSNorm (the file stores 1 + w; the weights
//           come out as HF's w, computed as transformers does: w_file - 1 in fp32), norms before and
//           after attention and MLP, embeddings times sqrt(hidden), QK-norm, sliding-window layers
//           (attention.sliding_window; every sixth layer global, or
//           attention.sliding_window_pattern) with their own RoPE base (rope.freq_base_swa,
//           10000 by default), attention scale 1/sqrt(head_dim) (1/sqrt(hidden/heads) for 62 layers,
//           Gemma 3 27B, as llama.cpp decides).
// Every ARCH.* metadata key is on an allow-list: read, or ignored because it cannot change the
// math (named in gguf_model.cc); any other key, and anything rlrun cannot compute (partial RoPE,
// logit soft-capping, experts, other scaling types), is refused with a message naming the key and
// its value. The vocabulary size is the length of tokenizer.ggml.tokens; embeddings are tied when
// there is no output.weight. Untrusted input: every value is checked before it sizes anything.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_tokenizer.h"  // the tokenizer side of a GGUF file
#include "engine/io/hf_checkpoint.h"
#include "engine/model/config.h"

namespace rlrun::engine {

// True when `path` names a GGUF file (by its .gguf extension) rather than an HF folder.
bool is_gguf_path(const std::string& path);

Result<ModelConfig> gguf_model_config(const GgufFile& file);

// Every tensor of hf_tensor_specs(config), dequantized to fp32 and in HF's layout, handed to `take`
// one at a time in file order: only one tensor's fp32 values are alive at a time (a model loads
// without a second copy of its weights). Errors name the file and tensor: missing, unexpected,
// given twice, of the wrong shape, or not finite; an error from `take` stops the walk.
Status for_each_gguf_tensor(const GgufFile& file, const ModelConfig& config,
                            const std::function<Status(HostTensor&&)>& take);
// The same, collected in hf_tensor_specs(config) order.
Result<std::vector<HostTensor>> gguf_model_tensors(const GgufFile& file, const ModelConfig& config);

// What the file's weights are stored as, for what a user sees (ModelConfig::torch_dtype, which
// rlrun validate and the run's first log line print):
// general.file_type's name and the tensor count of each type, most first, e.g.
// "Q4_K_M (133 Q5_0, 121 F32, 13 Q8_0, 12 Q4_K, 12 Q6_K), dequantized to fp32 on load".
std::string gguf_weight_types(const GgufFile& file);

// GgufFile::open, gguf_model_config, gguf_model_tensors.
Result<HfCheckpoint> load_gguf_checkpoint(const std::string& path);

}  // namespace rlrun::engine
