#include "trainer/trainer_inputs.h"

#include <algorithm>

#include "common/observe/log.h"
#include "trainer/lr_schedule.h"

namespace rlrun::trainer {

Result<TrainerOptions> trainer_options_from_config(const Config& c, std::function<double(int64_t)> learning_rate_at) {
  TrainerOptions o;
  RLRUN_ASSIGN_OR_RETURN(o.loss.algorithm, parse_algorithm(enum_name(c.algorithm)));
  RLRUN_ASSIGN_OR_RETURN(o.loss.aggregation, parse_loss_aggregation(enum_name(c.loss_aggregation)));
  RLRUN_ASSIGN_OR_RETURN(o.loss.ppo_clip_ref, parse_clip_reference(enum_name(c.ppo_clip_ref_logprobs)));
  RLRUN_ASSIGN_OR_RETURN(o.loss.tis_mode, parse_tis_mode(enum_name(c.tis_mode)));
  RLRUN_ASSIGN_OR_RETURN(o.loss.kl_estimator, parse_kl_estimator(enum_name(c.kl_estimator)));
  o.loss.clip_low = c.clip_low;
  o.loss.clip_high = c.clip_high;
  o.loss.clip_ratio_c = c.clip_ratio_c;
  o.loss.use_tis = c.use_tis;
  o.loss.tis_cap = c.tis_cap;
  o.loss.kl_coef = c.kl_coef;
  o.loss.entropy_coef = c.entropy_coef;
  o.loss.max_tokens = c.max_tokens;
  o.optimizer.adam_beta1 = c.adam_beta1;
  o.optimizer.adam_beta2 = c.adam_beta2;
  o.optimizer.adam_eps = c.adam_eps;
  o.optimizer.weight_decay = c.weight_decay;
  o.optimizer.grad_clip = c.grad_clip;
  o.optimizer.use_distributed_optimizer = c.use_distributed_optimizer;
  o.number_of_minibatches = c.number_of_minibatches;
  o.learning_rate = c.learning_rate;
  if (learning_rate_at) {
    o.learning_rate_at = std::move(learning_rate_at);
  } else {
    LrScheduleConfig schedule;
    RLRUN_ASSIGN_OR_RETURN(schedule.kind, parse_lr_schedule_kind(enum_name(c.lr_scheduler)));
    schedule.warmup_steps = c.warmup_steps;
    schedule.min_lr_ratio = c.min_lr_ratio;
    RLRUN_RETURN_IF_ERROR(validate_lr_schedule(schedule));
    const int64_t total = c.number_of_steps * c.number_of_minibatches;  // optimizer steps of the run
    const double base = c.learning_rate;
    o.learning_rate_at = [schedule, total, base](int64_t step) { return learning_rate(step, total, base, schedule); };
  }
  o.weight_broadcast_bucket_mb = c.weight_broadcast_bucket_mb;
  o.weight_broadcast_free_grad_buffers = c.weight_broadcast_free_grad_buffers;
  // Gloo (backend cpu) always moves host memory; NCCL moves device memory unless asked to stage.
  o.weight_broadcast_cpu_staging = c.backend == rlrun::BackendKind::kCpu || c.weight_broadcast_cpu_staging;
  RLRUN_RETURN_IF_ERROR(validate_policy_loss_config(o.loss));
  return o;
}

namespace {

Status check_sizes(const TrainBatch& b, uint64_t n) {
  auto bad = [&](const char* field, size_t got) {
    return protocol_error(str("TrainBatch step ", b.step, ": `", field, "` has ", got, " entries, expected ", n,
                              " (num_rows x row_len)"));
  };
  if (b.input_ids.size() != n) return bad("input_ids", b.input_ids.size());
  if (b.position_ids.size() != n) return bad("position_ids", b.position_ids.size());
  if (b.loss_mask.size() != n) return bad("loss_mask", b.loss_mask.size());
  if (b.advantages.size() != n) return bad("advantages", b.advantages.size());
  if (b.rollout_logprobs.size() != n) return bad("rollout_logprobs", b.rollout_logprobs.size());
  if (!b.ref_logprobs.empty() && b.ref_logprobs.size() != n) return bad("ref_logprobs", b.ref_logprobs.size());
  const auto& off = b.micro_batch_row_offsets;
  if (off.size() != static_cast<size_t>(b.num_micro_batches) + 1 || off.front() != 0 || off.back() != b.num_rows) {
    return protocol_error(str("TrainBatch step ", b.step, ": micro_batch_row_offsets must be num_micro_batches + 1 (",
                              b.num_micro_batches + 1, ") offsets from 0 to num_rows (", b.num_rows, ")"));
  }
  for (size_t k = 1; k < off.size(); ++k) {
    if (off[k] < off[k - 1]) return protocol_error(str("TrainBatch step ", b.step, ": micro_batch_row_offsets decrease at ", k));
  }
  const auto cu = b.cu_seqlens.span();
  if (cu.empty() || cu.front() != 0 || static_cast<uint64_t>(cu.back()) != n) {
    return protocol_error(str("TrainBatch step ", b.step, ": cu_seqlens must run from 0 to every token (", n, ")"));
  }
  for (size_t s = 1; s < cu.size(); ++s) {
    if (cu[s] <= cu[s - 1]) return protocol_error(str("TrainBatch step ", b.step, ": cu_seqlens not increasing at ", s));
  }
  if (!b.prefix_of.empty() && b.prefix_of.size() + 1 != cu.size())
    return protocol_error(str("TrainBatch step ", b.step, ": prefix_of has ", b.prefix_of.size(), " entries for ",
                              cu.size() - 1, " segments"));
  return Status();
}

// Per-sequence advantages when each sequence's masked predictions share one value.
void maybe_per_sequence(MicroBatch& mb) {
  if (mb.advantages.size() != mb.input_ids.size()) return;
  std::vector<float> per_seq;
  for (size_t s = 0; s + 1 < mb.cu_seqlens.size(); ++s) {
    bool seen = false;
    float value = 0.0f;
    for (int32_t t = mb.cu_seqlens[s]; t < mb.cu_seqlens[s + 1]; ++t) {
      if (!mb.loss_mask[t]) continue;
      if (seen && mb.advantages[t] != value) return;  // varies: keep per-token
      seen = true;
      value = mb.advantages[t];
    }
    per_seq.push_back(value);
  }
  mb.advantages = std::move(per_seq);
}

}  // namespace

Result<std::vector<MicroBatch>> micro_batches_from_train_batch(const TrainBatch& b) {
  const uint64_t n = static_cast<uint64_t>(b.num_rows) * b.row_len;
  RLRUN_RETURN_IF_ERROR(check_sizes(b, n));
  const auto cu = b.cu_seqlens.span();
  std::vector<MicroBatch> out;
  for (uint32_t k = 0; k < b.num_micro_batches; ++k) {
    const int64_t begin = static_cast<int64_t>(b.micro_batch_row_offsets[k]) * b.row_len;
    const int64_t end = static_cast<int64_t>(b.micro_batch_row_offsets[k + 1]) * b.row_len;
    if (begin == end) {
      out.emplace_back();  // an empty padding micro-batch
      continue;
    }
    const auto first = std::lower_bound(cu.begin(), cu.end(), static_cast<int32_t>(begin));
    const auto last = std::lower_bound(cu.begin(), cu.end(), static_cast<int32_t>(end));
    if (first == cu.end() || *first != begin || last == cu.end() || *last != end) {
      return protocol_error(str("TrainBatch step ", b.step, ": micro-batch ", k, " does not start and end on a cu_seqlens "
                                "boundary (a sequence straddles micro-batches)"));
    }
    std::vector<int32_t> local, prefix_of;
    for (auto it = first; it <= last; ++it) local.push_back(static_cast<int32_t>(*it - begin));
    if (!b.prefix_of.empty()) {  // segment indices local to the micro-batch
      const int64_t s0 = first - cu.begin(), s1 = last - cu.begin();
      for (int64_t s = s0; s < s1; ++s) {
        const int32_t p = b.prefix_of[static_cast<size_t>(s)];
        if (p >= 0 && (p < s0 || p >= s))
          return protocol_error(str("TrainBatch step ", b.step, ": segment ", s, " continues segment ", p,
                                    ", which is not an earlier segment of its micro-batch"));
        prefix_of.push_back(p < 0 ? -1 : static_cast<int32_t>(p - s0));
      }
    }
    const size_t a = static_cast<size_t>(begin), len = static_cast<size_t>(end - begin);
    RLRUN_ASSIGN_OR_RETURN(MicroBatch mb, make_micro_batch(b.input_ids.span().subspan(a, len),
                                                           b.position_ids.span().subspan(a, len), local,
                                                           b.loss_mask.span().subspan(a, len),
                                                           b.advantages.span().subspan(a, len),
                                                           b.rollout_logprobs.span().subspan(a, len), prefix_of,
                                                           b.ref_logprobs.empty() ? std::span<const float>()
                                                                                  : b.ref_logprobs.span().subspan(a, len)));
    maybe_per_sequence(mb);
    drop_untrained_sequences(mb);  // padding and untrained samples cost compute and change nothing
    share_common_prefix(mb);       // the groups' prompts' common start (a system prompt) once
    out.push_back(std::move(mb));
  }
  return out;
}

TrainResult train_result(const TrainBatch& batch, const StepReport& report, uint64_t weight_version) {
  TrainResult r;
  r.step = batch.step;
  r.rank = batch.rank;
  r.metrics = report.metrics();
  r.weight_version = weight_version;
  return r;
}

}  // namespace rlrun::trainer
