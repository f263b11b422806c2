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

// The tokens that end an answer: the one list `rlrun run` (its requests, run_stop_token_ids),
// `rlrun generate` and `rlrun serve` stop at. The chat template's `end_of_turn` first when there
// is one (the warm start ends answers with the first), then config.json's eos_token_id list, then
// the end-of-text tokens of the chat families rlrun knows (<|endoftext|>, <|im_end|>, </s>,
// <|eot_id|>) that `tokenizer` has (none without one). Unique, in that order.
std::vector<int32_t> stop_token_ids(const engine::ModelConfig& config, const engine::Tokenizer* tokenizer,
                                    std::optional<int32_t> end_of_turn);

}  // namespace rlrun::rollout
