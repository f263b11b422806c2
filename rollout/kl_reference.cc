// kl_reference.cc - the KL reference's log-probs of finished samples, on the rollout worker.
#include "rollout/kl_reference.h"

#include <algorithm>

namespace rlrun::rollout {

KlReference::KlReference() = default;
KlReference::~KlReference() = default;

Status KlReference::capture(const engine::Model& policy) {
  if (model_ == nullptr) {
    RLRUN_ASSIGN_OR_RETURN(model_, engine::Model::create(policy.backend(), policy.config(), policy.options()));
    model_->weights().release_grads();   // scored without gradients
    model_->weights().release_master();  // compute weights only (a no-op where they are the master)
  }
  engine::Backend& backend = policy.backend();
  backend.synchronize();
  model_->weights().copy_compute_from(policy.weights());
  backend.synchronize();
  return Status();
}

namespace {

// The packed batch of several groups, laid out as the trainer packs a group
// (orchestrator/data/batcher.h): with sharing, the prompt less its last token once, then each
// sample continuing it with that token and its completion; without, each sample whole.
struct Packed {
  std::vector<int32_t> tokens, positions, cu{0}, targets, prefix_of;
  std::vector<std::vector<int32_t>> first_scored;  // [g][i]: the index whose target is completion i's first token

  void push(int32_t id, int32_t position, int32_t target) {
    tokens.push_back(id);
    positions.push_back(position);
    targets.push_back(target);
  }
  int32_t end_segment(int32_t continues) {
    cu.push_back(static_cast<int32_t>(tokens.size()));
    prefix_of.push_back(continues);
    return static_cast<int32_t>(prefix_of.size()) - 1;
  }
  void add(const ScoredGroup& g, bool can_share) {
    const std::span<const int32_t> prompt = g.prompt;
    const int32_t p = static_cast<int32_t>(prompt.size());
    const bool share = can_share && p >= 2 && g.completions.size() > 1;
    int32_t root = -1;
    if (share) {
      for (int32_t t = 0; t + 1 < p; ++t) push(prompt[t], t, -1);
      root = end_segment(-1);
    }
    std::vector<int32_t>& first = first_scored.emplace_back();
    for (const std::span<const int32_t> c : g.completions) {
      for (int32_t t = share ? p - 1 : 0; t < p; ++t) push(prompt[t], t, t + 1 < p || c.empty() ? -1 : c[0]);
      first.push_back(static_cast<int32_t>(tokens.size()) - 1);
      for (size_t j = 0; j < c.size(); ++j) push(c[j], p + static_cast<int32_t>(j), j + 1 < c.size() ? c[j + 1] : -1);
      end_segment(root);
    }
  }
};

}  // namespace

Result<std::vector<std::vector<std::vector<float>>>> KlReference::score(std::span<const ScoredGroup> groups) {
  if (model_ == nullptr) return unavailable("the KL reference has not been captured yet");
  std::vector<std::vector<std::vector<float>>> out(groups.size());
  Packed packed;
  const bool can_share = model_->backend().compute_dtype() == engine::DType::kF32;
  int64_t samples = 0;
  for (const ScoredGroup& g : groups) {
    if (g.prompt.empty()) return invalid_argument("KL reference: a prompt needs at least one token");
    packed.add(g, can_share);
    samples += static_cast<int64_t>(g.completions.size());
  }
  if (packed.tokens.empty()) return out;
  engine::PackedBatch batch;
  batch.tokens = packed.tokens;
  batch.positions = packed.positions;
  batch.cu_seqlens = packed.cu;
  batch.targets = packed.targets;
  const bool any_shared = std::any_of(packed.prefix_of.begin(), packed.prefix_of.end(), [](int32_t p) { return p >= 0; });
  if (any_shared) batch.prefix_of = packed.prefix_of;
  RLRUN_ASSIGN_OR_RETURN(engine::ForwardOutput fwd, model_->forward(batch, /*for_backward=*/false));
  const std::vector<float> logprobs = engine::to_host_f32(fwd.logprobs);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].completions.size(); ++i) {
      const auto first = logprobs.begin() + packed.first_scored[g][i];
      out[g].emplace_back(first, first + static_cast<std::ptrdiff_t>(groups[g].completions[i].size()));
    }
  }
  samples_scored_ += samples;
  tokens_scored_ += static_cast<int64_t>(packed.tokens.size());
  return out;
}

}  // namespace rlrun::rollout
