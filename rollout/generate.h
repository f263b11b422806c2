// generate.h - one sequence, generated over the paged KV cache: prefill the prompt, then decode
// one token at a time, sampling each with sampler.h, until a stop token or the token budget.
//
// This is the single-sequence path (`rlrun generate`, tests); the rollout server's continuous
// batching runs the same Model::forward_cached / sample_token steps over many sequences.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/sampler.h"

namespace rlrun::rollout {

struct GenerateOptions {
  int64_t max_tokens = 64;           // new tokens at most (>= 1)
  SamplingParams sampling;
  uint64_t seed = 0;                 // SampleRng(seed, 0)
  std::vector<int32_t> stop_ids;     // generation ends after emitting any of these
  int64_t kv_block_size = 16;
};

enum class FinishReason { kStop, kLength };
const char* finish_reason_name(FinishReason reason);  // "stop", "length"

struct Generation {
  std::vector<int32_t> ids;       // the completion, including the stop token when one ended it
  std::vector<float> logprobs;    // per id: log-prob under the distribution sampled (sampler.h)
  FinishReason finish_reason = FinishReason::kLength;
};

// Generates a completion of `prompt` (non-empty, ids in [0, vocab)). The prompt plus the
// completion never exceed the model's max_position: generation stops there with kLength.
// invalid_argument for a bad prompt or options.
Result<Generation> generate(engine::Model& model, std::span<const int32_t> prompt, const GenerateOptions& options);

// Stop tokens of a checkpoint: config.json's eos_token_id and, when a tokenizer is given, its
// `<|im_end|>` and `<|endoftext|>` tokens (ChatML models end a turn with <|im_end|>). Sorted,
// unique.
std::vector<int32_t> default_stop_ids(const engine::ModelConfig& config, const engine::Tokenizer* tokenizer);

}  // namespace rlrun::rollout
