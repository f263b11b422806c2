// scheduler_step.cc - one engine step: reserve decode slots (preempting when short), admit,
// one forward over the batch, sample, finish.
#include <algorithm>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/tensor.h"
#include "rollout/scheduler.h"
#include "rollout/sequence.h"

namespace rlrun::rollout {

void Scheduler::preempt(size_t running_index) {
  std::unique_ptr<Sequence> seq = std::move(running_[running_index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  RLRUN_CHECK(cache_->release(seq->id).ok());
  seq->in_cache = false;
  ++seq->out.preemptions;
  ++stats_.preemptions;
  preempted_this_step_ = true;
  waiting_.push_front(std::move(seq));  // victims go back first, before newer requests
}

// Every running sequence must be able to write its next token. Preempts the most recently
// admitted sequences until the free blocks cover what the rest need.
void Scheduler::reserve_decode_slots() {
  while (!running_.empty()) {
    int64_t need = 0;
    for (const auto& s : running_) need += cache_->tables().blocks_needed(s->id, 1);
    if (need <= cache_->num_free_blocks()) return;
    size_t victim = 0;
    for (size_t i = 1; i < running_.size(); ++i)
      if (running_[i]->admit_order > running_[victim]->admit_order) victim = i;
    preempt(victim);
  }
}

Scheduler::Sequence* Scheduler::prefix_donor(const Sequence& seq, int64_t n) const {
  for (const auto& s : running_)
    if (s->request == seq.request && s->in_cache && cache_->length(s->id) >= n && cache_->can_fork(s->id, n))
      return s.get();
  return nullptr;
}

// First come first served: stops at the first sequence that does not fit (so a long prompt is
// not starved by short ones), skipping only those held back by min_weight_version and samples
// that will fork their prompt from a sibling being prefilled in this step.
std::vector<Scheduler::Sequence*> Scheduler::admit() {
  std::vector<Sequence*> admitted;
  if (preempted_this_step_) return admitted;  // the pool is short: admitting would thrash
  int64_t free = cache_->num_free_blocks();
  for (const auto& s : running_) free -= cache_->tables().blocks_needed(s->id, 1);
  int64_t prefill_tokens = 0;
  const int64_t bs = options_.kv_block_size;
  for (size_t i = 0; i < waiting_.size();) {
    if (static_cast<int64_t>(running_.size()) >= options_.max_num_seqs) break;
    Sequence& seq = *waiting_[i];
    if (seq.request->spec.min_weight_version > weight_version_) {
      ++i;
      continue;
    }
    const int64_t n = seq.length();
    // All of the prompt but its last token can come from a sibling's cache: that token's logits
    // start this sample's own stream.
    const int64_t shareable = static_cast<int64_t>(seq.request->spec.prompt.size()) - 1;
    Sequence* donor = shareable > 0 ? prefix_donor(seq, shareable) : nullptr;
    if (shareable > 0 && donor == nullptr &&
        std::any_of(admitted.begin(), admitted.end(), [&](const Sequence* a) { return a->request == seq.request; })) {
      ++i;  // its sibling computes the prompt in this step; fork from it in the next
      continue;
    }
    const int64_t forked = donor ? shareable : 0;
    const int64_t blocks = (n + bs - 1) / bs - forked / bs;  // forked full blocks are shared
    if (blocks > free) break;
    if (prefill_tokens > 0 && prefill_tokens + n - forked > options_.max_prefill_tokens) break;
    seq.id = next_seq_id_++;
    RLRUN_CHECK(cache_->add_sequence(seq.id).ok());
    if (donor) {
      const Status forked_ok = cache_->fork(donor->id, seq.id, forked);
      RLRUN_CHECK(forked_ok.ok(), forked_ok.message());
      stats_.prefix_tokens_shared += forked;
    }
    seq.forked = forked;
    seq.in_cache = true;
    seq.admit_order = next_admit_order_++;
    if (!seq.scheduled_once) {
      seq.scheduled_once = true;
      seq.out.queue_seconds = std::chrono::duration<double>(Clock::now() - seq.request->arrival).count();
    }
    free -= blocks;
    prefill_tokens += n - forked;
    admitted.push_back(&seq);
    running_.push_back(std::move(waiting_[i]));
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return admitted;
}

// Appends a sampled token; finishes the sequence when it hits a stop token or a length limit.
// Returns true when it finished.
bool Scheduler::append_token(Sequence& seq, SampledToken token) {
  SampleOutput& out = seq.out;
  out.tokens.push_back(token.id);
  out.logprobs.push_back(token.logprob);
  out.weight_versions.push_back(static_cast<int64_t>(weight_version_));
  ++stats_.tokens_generated;
  const GenerationRequest& spec = seq.request->spec;
  if (spec.stream) streamed_.push_back({out.request_id, out.sample_index, token.id, token.logprob});
  if (std::find(spec.stop_token_ids.begin(), spec.stop_token_ids.end(), token.id) != spec.stop_token_ids.end()) {
    finish(seq, FinishReason::kStop);
  } else if ((spec.max_tokens > 0 && static_cast<int64_t>(out.tokens.size()) >= spec.max_tokens) ||
             seq.length() >= options_.max_model_len) {
    finish(seq, FinishReason::kLength);
  }
  return seq.done;
}

Status Scheduler::run_batch(const std::vector<Sequence*>& decoding, const std::vector<Sequence*>& prefilling) {
  const auto start = Clock::now();
  std::vector<engine::SeqId> ids;
  std::vector<int32_t> tokens, cu{0};
  for (Sequence* s : decoding) {
    ids.push_back(s->id);
    tokens.push_back(s->out.tokens.back());
    cu.push_back(static_cast<int32_t>(tokens.size()));
  }
  for (Sequence* s : prefilling) {  // prompt, then what was generated before a preemption, less what was forked
    ids.push_back(s->id);
    const std::vector<int32_t>& prompt = s->request->spec.prompt;
    tokens.insert(tokens.end(), prompt.begin() + s->forked, prompt.end());
    tokens.insert(tokens.end(), s->out.tokens.begin(), s->out.tokens.end());
    cu.push_back(static_cast<int32_t>(tokens.size()));
  }
  last_step_.decoding = static_cast<int64_t>(decoding.size());
  last_step_.prefill_tokens = static_cast<int64_t>(tokens.size() - decoding.size());
  last_step_.context_tokens = 0;
  for (Sequence* s : decoding) last_step_.context_tokens += s->length() - 1;  // in the cache before this step
  for (Sequence* s : prefilling) last_step_.context_tokens += s->forked;
  Result<engine::Tensor> logits = model_.forward_cached(*cache_, ids, tokens, cu);
  if (!logits.ok()) {
    for (auto* group : {&decoding, &prefilling})
      for (Sequence* s : *group) finish(*s, FinishReason::kError, str("engine step failed: ", logits.status().message()));
    return logits.status();
  }
  ++stats_.steps;
  stats_.max_running = std::max<int64_t>(stats_.max_running, static_cast<int64_t>(ids.size()));
  const std::vector<float> host = engine::to_host_f32(*logits);
  // Timed before sampling: a sequence's output moves to finished_ when it finishes.
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (Sequence* s : decoding) s->out.decode_seconds += seconds;
  for (Sequence* s : prefilling) s->out.prefill_seconds += seconds;
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  size_t row = 0;
  for (auto* group : {&decoding, &prefilling}) {
    for (Sequence* s : *group) {
      const std::span<const float> r(host.data() + row * vocab, vocab);
      ++row;
      append_token(*s, sample_token(r, s->request->spec.sampling, s->rng, scratch_));
    }
  }
  return {};
}

Status Scheduler::step() {
  preempted_this_step_ = false;
  last_step_ = {};
  reserve_decode_slots();
  std::vector<Sequence*> decoding;
  for (const auto& s : running_) decoding.push_back(s.get());
  const std::vector<Sequence*> prefilling = admit();
  if (decoding.empty() && prefilling.empty()) return {};
  Status status = run_batch(decoding, prefilling);
  std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->done; });
  return status;
}

}  // namespace rlrun::rollout
