// gguf_model.h - a GGUF "llama" model file as what an HF folder gives: ModelConfig, the weights
// in HF naming, and the tokenizer.
//
// Config keys: llama.{embedding_length, block_count, feed_forward_length, context_length,
// attention.head_count, attention.head_count_kv, attention.layer_norm_rms_epsilon,
// rope.freq_base}; the vocabulary size is the length of tokenizer.ggml.tokens; embeddings are
// tied when there is no output.weight. Tensors are renamed from llama.cpp's names
// (blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight, ...) and the Q/K rows are put
// back in HF's order (llama.cpp's converter interleaves the two halves of each head's rotary
// dimensions). Refused with a message naming the key: other architectures, RoPE scaling, a
// rope.dimension_count other than head_dim, tokenizers other than "gpt2" (byte-level BPE).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/gguf.h"
#include "engine/io/hf_checkpoint.h"
#include "engine/model/config.h"
#include "engine/tokenizer/tokenizer.h"

namespace rlrun::engine {

// True when `path` names a GGUF file (by its .gguf extension) rather than an HF folder.
bool is_gguf_path(const std::string& path);

Result<ModelConfig> gguf_model_config(const GgufFile& file);

// Every tensor of hf_tensor_specs(config), in that order, dequantized to fp32. Errors name the
// file and tensor: missing, unexpected, or of the wrong shape.
Result<std::vector<HostTensor>> gguf_model_tensors(const GgufFile& file, const ModelConfig& config);

// GgufFile::open, gguf_model_config, gguf_model_tensors.
Result<HfCheckpoint> load_gguf_checkpoint(const std::string& path);

// The HF tokenizer.json equivalent of the file's tokenizer.ggml.* vocabulary: BPE with tokens,
// merges, byte-level pre-tokenizer (tokenizer.ggml.pre "smollm" splits single digits first);
// control tokens (token_type 3) become special added tokens, user-defined ones (4) plain ones.
Result<std::string> gguf_tokenizer_json(const GgufFile& file);
Result<Tokenizer> load_gguf_tokenizer(const std::string& path);

// The HF tokenizer_config.json equivalent of the file's metadata: the bos/eos/unk/pad tokens by
// content, tokenizer.chat_template when present, model_max_length (what `rlrun convert` writes and
// engine/io/tokenizer_config.h reads).
Result<std::string> gguf_tokenizer_config_json(const GgufFile& file, const ModelConfig& config);

}  // namespace rlrun::engine
