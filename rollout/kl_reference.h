// kl_reference.h - a rollout worker scores its finished samples under the KL reference
// (kl_reference_on: rollout), so the trainer need not run the reference's forward pass.
//
// The KL reference is the policy before its first RL update: weight version 0 (the trainer's
// copy, trainer/train_step.h, holds the same weights). capture() copies the weights the worker
// generates with when the orchestrator's weight sync says they are the reference; score() then
// runs ONE forward pass (no KV cache, no gradients) over several prompts and their samples'
// completions and returns the reference's log-probability of every completion token. The samples
// of one prompt share it: the prompt is computed once (engine::PackedBatch::prefix_of) where the
// backend computes in f32, else each sample is its own sequence.
//
// Memory: one more copy of the compute weights (orchestrator/plan: "KL reference weights"),
// allocated at the first capture().
// Threads: the thread driving the policy model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/model/model.h"

namespace rlrun::rollout {

// A prompt (at least one token) and the completions sampled after it.
struct ScoredGroup {
  std::span<const int32_t> prompt;
  std::vector<std::span<const int32_t>> completions;
};

class KlReference {
 public:
  KlReference();
  ~KlReference();

  // Copies `policy`'s compute weights as the reference (replacing an earlier copy).
  Status capture(const engine::Model& policy);
  bool captured() const { return model_ != nullptr; }

  // out[g][i]: the reference log-probs of groups[g].completions[i], one per token.
  // invalid_argument for an empty prompt or ids outside the vocabulary; unavailable before capture().
  Result<std::vector<std::vector<std::vector<float>>>> score(std::span<const ScoredGroup> groups);

  int64_t samples_scored() const { return samples_scored_; }
  int64_t tokens_scored() const { return tokens_scored_; }  // tokens its forward passes computed

 private:
  std::unique_ptr<engine::Model> model_;
  int64_t samples_scored_ = 0, tokens_scored_ = 0;
};

}  // namespace rlrun::rollout
