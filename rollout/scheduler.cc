// scheduler.cc - requests in and out: creation, validation, add, cancel, finish, stats. The step
// itself is in scheduler_step.cc.
#include "rollout/scheduler.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/observe/log.h"
#include "rollout/sequence.h"

namespace rlrun::rollout {

int64_t kv_blocks_for_budget(const engine::Model& model, const SchedulerOptions& options, int64_t bytes) {
  const int64_t bs = std::max<int64_t>(1, options.kv_block_size);
  if (bytes <= 0) return options.max_num_seqs * ((options.max_model_len + bs - 1) / bs);
  const auto kc = engine::KvCacheConfig::for_model(model.config(), bs, 0);
  return kc.blocks_for_bytes(bytes, model.backend().compute_dtype());
}

Result<std::unique_ptr<Scheduler>> Scheduler::create(engine::Model& model, const SchedulerOptions& options) {
  const SchedulerOptions& o = options;
  if (o.max_num_seqs < 1 || o.kv_block_size < 1 || o.max_prefill_tokens < 1 || o.max_samples_per_request < 1)
    return invalid_argument("scheduler: max_num_seqs, kv_block_size, max_prefill_tokens and "
                            "max_samples_per_request must be positive");
  if (o.max_model_len < 2) return invalid_argument(str("scheduler: max_model_len ", o.max_model_len, " is below 2"));
  if (o.max_model_len > model.config().max_position)
    return invalid_argument(str("scheduler: max_model_len ", o.max_model_len, " exceeds the model's max_position ",
                                model.config().max_position));
  if (o.kv_num_blocks * o.kv_block_size < o.max_model_len)
    return invalid_argument(str("scheduler: the KV pool (", o.kv_num_blocks, " blocks of ", o.kv_block_size,
                                " tokens) cannot hold one sequence of max_model_len ", o.max_model_len,
                                " tokens; raise kv_cache_memory_mb or lower max_model_len"));
  RLRUN_ASSIGN_OR_RETURN(
      std::unique_ptr<engine::KvCache> cache,
      engine::KvCache::create(model.backend(), engine::KvCacheConfig::for_model(model.config(), o.kv_block_size,
                                                                               o.kv_num_blocks)));
  return std::unique_ptr<Scheduler>(new Scheduler(model, options, std::move(cache)));
}

Scheduler::Scheduler(engine::Model& model, const SchedulerOptions& options, std::unique_ptr<engine::KvCache> cache)
    : model_(model), options_(options), cache_(std::move(cache)) {
  stats_.kv_blocks_total = options.kv_num_blocks;
}

Scheduler::~Scheduler() = default;

std::string Scheduler::validate(const GenerationRequest& r) const {
  const int64_t vocab = model_.config().vocab_size;
  if (r.num_samples == 0) return "num_samples is 0";
  if (r.num_samples > options_.max_samples_per_request)
    return str("num_samples ", r.num_samples, " exceeds the limit ", options_.max_samples_per_request);
  if (uint64_t{r.first_sample_index} + r.num_samples > uint64_t{UINT32_MAX}) return "sample indices overflow 32 bits";
  if (r.prompt.empty()) return "the prompt is empty";
  if (static_cast<int64_t>(r.prompt.size()) + 1 > options_.max_model_len)
    return str("the prompt has ", r.prompt.size(), " tokens; with one generated token that exceeds max_model_len ",
               options_.max_model_len);
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= vocab)
      return str("prompt token ", i, " has id ", r.prompt[i], " outside the vocabulary [0, ", vocab, ")");
  }
  const float t = r.sampling.temperature, p = r.sampling.top_p;
  if (!std::isfinite(t) || t < 0) return str("temperature ", t, " is not a finite value >= 0");
  if (!(p > 0 && p <= 1)) return str("top_p ", p, " is not in (0, 1]");
  if (r.max_tokens < 0) return str("max_tokens ", r.max_tokens, " is negative");
  if (is_active(r.request_id)) return str("request id ", r.request_id, " is already being generated");
  return {};
}

void Scheduler::add(GenerationRequest request) {
  const std::string error = validate(request);
  if (!error.empty()) {
    const uint32_t n = request.num_samples >= 1 && request.num_samples <= options_.max_samples_per_request &&
                               uint64_t{request.first_sample_index} + request.num_samples <= uint64_t{UINT32_MAX}
                           ? request.num_samples
                           : 1;
    for (uint32_t i = 0; i < n; ++i) {
      SampleOutput out;
      out.request_id = request.request_id;
      out.sample_index = request.first_sample_index + i;
      out.finish_reason = FinishReason::kError;
      out.error = str("request ", request.request_id, ": ", error);
      finished_.push_back(std::move(out));
    }
    return;
  }
  auto shared = std::make_shared<Request>(Request{std::move(request), Clock::now()});
  for (uint32_t i = 0; i < shared->spec.num_samples; ++i)
    waiting_.push_back(std::make_unique<Sequence>(shared, shared->spec.first_sample_index + i));
}

void Scheduler::finish(Sequence& seq, FinishReason reason, std::string error) {
  if (seq.in_cache) {
    RLRUN_CHECK(cache_->release(seq.id).ok());
    seq.in_cache = false;
  }
  seq.done = true;
  seq.out.finish_reason = reason;
  seq.out.error = std::move(error);
  finished_.push_back(std::move(seq.out));
}

int64_t Scheduler::cancel(uint64_t request_id) {
  int64_t n = 0;
  auto cancel_in = [&](auto& container) {
    for (auto& s : container) {
      if (s->out.request_id != request_id) continue;
      finish(*s, FinishReason::kCancelled);
      ++n;
    }
    std::erase_if(container, [](const std::unique_ptr<Sequence>& s) { return s->done; });
  };
  cancel_in(running_);
  cancel_in(waiting_);
  return n;
}

std::vector<SampleOutput> Scheduler::take_finished() {
  std::vector<SampleOutput> out;
  out.swap(finished_);
  return out;
}

std::vector<StreamedToken> Scheduler::take_streamed() {
  std::vector<StreamedToken> out;
  out.swap(streamed_);
  return out;
}

bool Scheduler::is_active(uint64_t request_id) const {
  auto match = [&](const std::unique_ptr<Sequence>& s) { return s->out.request_id == request_id; };
  return std::any_of(running_.begin(), running_.end(), match) || std::any_of(waiting_.begin(), waiting_.end(), match);
}

bool Scheduler::can_step() const {
  if (!running_.empty()) return true;
  return std::any_of(waiting_.begin(), waiting_.end(), [&](const std::unique_ptr<Sequence>& s) {
    return s->request->spec.min_weight_version <= weight_version_;
  });
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = stats_;
  s.running = static_cast<int64_t>(running_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.kv_blocks_used = cache_->tables().num_blocks() - cache_->num_free_blocks();
  s.kv_blocks_trimmed = cache_->blocks_trimmed();
  return s;
}

}  // namespace rlrun::rollout
