#include "rollout/generate.h"

#include <algorithm>

#include "common/observe/log.h"
#include "engine/kv/kv_cache.h"

namespace rlrun::rollout {

const char* finish_reason_name(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : "length";
}

namespace {

Status validate(const engine::ModelConfig& c, std::span<const int32_t> prompt, const GenerateOptions& o) {
  if (prompt.empty()) return invalid_argument("generate: the prompt has no tokens");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size) {
      return invalid_argument(str("generate: prompt token ", i, " has id ", prompt[i],
                                  ", outside the model's vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  if (static_cast<int64_t>(prompt.size()) >= c.max_position) {
    return invalid_argument(str("generate: the prompt has ", prompt.size(), " tokens; the model takes at most ",
                                c.max_position, " positions, leaving no room for a completion"));
  }
  if (o.max_tokens < 1) return invalid_argument(str("generate: max_tokens must be >= 1, got ", o.max_tokens));
  if (!(o.sampling.temperature >= 0.0f)) {
    return invalid_argument(str("generate: temperature must be >= 0, got ", o.sampling.temperature));
  }
  if (!(o.sampling.top_p > 0.0f && o.sampling.top_p <= 1.0f)) {
    return invalid_argument(str("generate: top_p must be in (0, 1], got ", o.sampling.top_p));
  }
  if (o.kv_block_size < 1) return invalid_argument("generate: kv_block_size must be >= 1");
  return {};
}

}  // namespace

Result<Generation> generate(engine::Model& model, std::span<const int32_t> prompt, const GenerateOptions& options) {
  const engine::ModelConfig& c = model.config();
  RLRUN_RETURN_IF_ERROR(validate(c, prompt, options));
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t max_new = std::min(options.max_tokens, c.max_position - prompt_len);
  // Room for every position this sequence can reach (the last sampled token is never fed back).
  const int64_t blocks = (prompt_len + max_new + options.kv_block_size - 1) / options.kv_block_size;
  RLRUN_ASSIGN_OR_RETURN(auto cache, engine::KvCache::create(model.backend(),
                                                             engine::KvCacheConfig::for_model(c, options.kv_block_size, blocks)));
  const engine::SeqId seq = 0;
  RLRUN_RETURN_IF_ERROR(cache->add_sequence(seq));

  Generation out;
  SampleRng rng(options.seed, 0);
  SamplerScratch scratch;
  const engine::SeqId seqs[] = {seq};
  const int32_t cu_prompt[] = {0, static_cast<int32_t>(prompt_len)};
  RLRUN_ASSIGN_OR_RETURN(engine::Tensor logits, model.forward_cached(*cache, seqs, prompt, cu_prompt));
  while (true) {
    const std::vector<float> row = engine::to_host_f32(logits);  // (1, V)
    const SampledToken t = sample_token(row, options.sampling, rng, scratch);
    out.ids.push_back(t.id);
    out.logprobs.push_back(t.logprob);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), t.id) != options.stop_ids.end()) {
      out.finish_reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int64_t>(out.ids.size()) >= max_new) break;
    const int32_t next[] = {t.id};
    RLRUN_ASSIGN_OR_RETURN(logits, model.decode(*cache, seqs, next));
  }
  return out;
}

std::vector<int32_t> stop_token_ids(const engine::ModelConfig& config, const engine::Tokenizer* tokenizer,
                                    std::optional<int32_t> end_of_turn) {
  std::vector<int32_t> ids;
  const auto add = [&](int64_t id) {
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(static_cast<int32_t>(id));
  };
  if (end_of_turn) add(*end_of_turn);
  add(config.eos_token_id);
  for (int64_t id : config.extra_eos_token_ids) add(id);
  if (tokenizer != nullptr) {
    for (const char* name : {"<|endoftext|>", "<|im_end|>", "</s>", "<|eot_id|>"}) {
      if (std::optional<int32_t> id = tokenizer->token_to_id(name)) add(*id);
    }
  }
  return ids;
}

}  // namespace rlrun::rollout
