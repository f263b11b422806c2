#include "trainer/train_step.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/check.h"
#include "common/clock.h"
#include "common/observe/log.h"
#include "trainer/rank_reduce.h"

namespace rlrun::trainer {

using engine::Shape;
using engine::Tensor;

namespace {

// Resident peak of the latest occurrence of `phase` (-1 if it never completed).
int64_t last_rss_peak(const PeakMemoryTracker& tracker, const std::string& phase) {
  for (const PeakMemoryTracker::PhasePeak& p : tracker.peaks()) {
    if (p.phase == phase) return p.last_peak_bytes;
  }
  return -1;
}

// Records backend (and, with a tracker, resident) memory around one phase.
class PhaseScope {
 public:
  PhaseScope(engine::Backend& backend, PeakMemoryTracker* tracker, const char* name, PhaseMemory& out)
      : backend_(backend), tracker_(tracker), name_(name), out_(out),
        peak_before_(static_cast<int64_t>(backend.peak_bytes())) {
    out_.backend_in_use_begin = static_cast<int64_t>(backend.bytes_in_use());
    if (tracker_ != nullptr) tracker_->begin(name_);
  }
  ~PhaseScope() {
    backend_.synchronize();
    out_.backend_in_use_end = static_cast<int64_t>(backend_.bytes_in_use());
    out_.backend_peak_bytes = static_cast<int64_t>(backend_.peak_bytes());
    out_.raised_peak = out_.raised_peak || out_.backend_peak_bytes > peak_before_;
    if (tracker_ != nullptr) {
      tracker_->end();
      out_.rss_peak_bytes = std::max(out_.rss_peak_bytes, last_rss_peak(*tracker_, name_));
    }
  }

 private:
  engine::Backend& backend_;
  PeakMemoryTracker* tracker_;
  std::string name_;
  PhaseMemory& out_;
  int64_t peak_before_;
};

// PolicyLossResult <-> doubles, so ranks can exchange and merge them exactly.
constexpr size_t kLossFields = 20;
std::vector<double> loss_to_doubles(const PolicyLossResult& r) {
  const PolicyLossStats& s = r.stats;
  return {r.loss, r.pg_loss, r.kl_loss, r.entropy_loss, double(s.tokens), double(s.sequences), double(s.units),
          double(s.clipped_low), double(s.clipped_high), double(s.dual_clipped), double(s.tis_truncated), s.ratio_sum,
          s.ratio_min, s.ratio_max, s.tis_weight_sum, s.tis_weight_min, s.tis_weight_max, s.approx_kl_sum,
          s.ref_kl_sum, s.entropy_sum};
}
PolicyLossResult loss_from_doubles(const double* d) {
  PolicyLossResult r;
  r.loss = d[0], r.pg_loss = d[1], r.kl_loss = d[2], r.entropy_loss = d[3];
  PolicyLossStats& s = r.stats;
  s.tokens = int64_t(d[4]), s.sequences = int64_t(d[5]), s.units = int64_t(d[6]);
  s.clipped_low = int64_t(d[7]), s.clipped_high = int64_t(d[8]), s.dual_clipped = int64_t(d[9]);
  s.tis_truncated = int64_t(d[10]), s.ratio_sum = d[11], s.ratio_min = d[12], s.ratio_max = d[13];
  s.tis_weight_sum = d[14], s.tis_weight_min = d[15], s.tis_weight_max = d[16];
  s.approx_kl_sum = d[17], s.ref_kl_sum = d[18], s.entropy_sum = d[19];
  return r;
}
void add_loss(PolicyLossResult& into, const PolicyLossResult& r) {
  into.loss += r.loss, into.pg_loss += r.pg_loss, into.kl_loss += r.kl_loss, into.entropy_loss += r.entropy_loss;
  into.stats.merge(r.stats);
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainerOptions& options, TrainableModel& model,
                                                 engine::Communicator* trainer_comm,
                                                 engine::Communicator* weight_comm, PeakMemoryTracker* memory) {
  RLRUN_RETURN_IF_ERROR(validate_policy_loss_config(options.loss));
  if (options.number_of_minibatches < 1) {
    return invalid_argument(str("number_of_minibatches must be >= 1, got ", options.number_of_minibatches));
  }
  if (options.weight_broadcast_bucket_mb < 1) {
    return invalid_argument(str("weight_broadcast_bucket_mb must be >= 1, got ", options.weight_broadcast_bucket_mb));
  }
  const engine::DType weight_dtype = model.weights_flat().dtype();
  // When the optimizer will keep the master of its shard, the gradients are freed while the full
  // master and the optimizer's state coexist, so that moment stays under the steady state.
  const bool regrow_grads = Optimizer::keeps_master(options.optimizer, comm_size(trainer_comm), weight_dtype) &&
                            model.has_grads();
  if (regrow_grads) model.release_grads();
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                         Optimizer::create(model.backend(), model.flat_size(), decay_ranges(model.param_specs()),
                                           options.optimizer, trainer_comm, weight_dtype));
  if (optimizer->keeps_master()) {  // the optimizer holds the master of its shard: the full copy goes
    optimizer->init_master(model.params_flat());
    model.release_master();
  }
  if (regrow_grads) model.restore_grads();
  return std::unique_ptr<Trainer>(new Trainer(options, model, trainer_comm, weight_comm, memory, std::move(optimizer)));
}

Trainer::Trainer(const TrainerOptions& options, TrainableModel& model, engine::Communicator* trainer_comm,
                 engine::Communicator* weight_comm, PeakMemoryTracker* memory, std::unique_ptr<Optimizer> optimizer)
    : options_(options), model_(model), trainer_comm_(trainer_comm), weight_comm_(weight_comm), memory_(memory),
      optimizer_(std::move(optimizer)) {
  set_weight_comm(weight_comm);
}

void Trainer::set_weight_comm(engine::Communicator* comm) {
  weight_comm_ = comm;
  sender_.reset();
  if (weight_comm_ == nullptr) return;
  engine::FlatLayout layout{model_.param_specs(), model_.flat_size(), "f32"};
  sender_ = std::make_unique<WeightSender>(model_.backend(), std::move(layout), *weight_comm_,
                                           options_.weight_broadcast_bucket_mb << 20,
                                           options_.weight_broadcast_cpu_staging);
}

int Trainer::rank() const { return comm_rank(trainer_comm_); }

double Trainer::learning_rate() const {
  return options_.learning_rate_at ? options_.learning_rate_at(optimizer_->step_count()) : options_.learning_rate;
}

Result<std::vector<std::vector<float>>> Trainer::recompute_logprobs(std::span<const MicroBatch> micro_batches) {
  std::vector<std::vector<float>> out;
  out.reserve(micro_batches.size());
  for (const MicroBatch& mb : micro_batches) {
    if (mb.num_tokens() == 0) {
      out.emplace_back();
      continue;
    }
    RLRUN_ASSIGN_OR_RETURN(ModelForward fwd, model_.forward(mb, /*for_backward=*/false));
    out.push_back(engine::to_host_f32(fwd.logprobs));
  }
  return out;
}

void Trainer::set_reference(TrainableModel* reference) {
  RLRUN_CHECK(reference == nullptr || (reference->flat_size() == model_.flat_size() &&
                                       reference->weights_flat().dtype() == model_.weights_flat().dtype()),
              "trainer: the KL reference must have the policy's parameter layout and compute dtype");
  reference_ = reference;
  reference_captured_ = false;
}

Result<std::vector<MicroBatch>> Trainer::score_with_reference(std::span<const MicroBatch> micro_batches) {
  if (!reference_captured_) {
    model_.backend().synchronize();
    reference_->backend().copy(reference_->weights_flat(), model_.weights_flat());
    reference_->weights_written();
    reference_->backend().synchronize();
    reference_captured_ = true;
    if (rank() == 0) {
      log::info(str("trainer: KL reference (kl_coef ", options_.loss.kl_coef, ") = the policy after ",
                    optimizer_->step_count(), " optimizer steps, before its first RL update"));
    }
  }
  std::vector<MicroBatch> out(micro_batches.begin(), micro_batches.end());
  for (MicroBatch& mb : out) {
    // Scored by the rollout workers (kl_reference_on: rollout) under the same weights.
    if (mb.num_tokens() == 0 || !mb.ref_logprobs.empty()) continue;
    RLRUN_ASSIGN_OR_RETURN(ModelForward fwd, reference_->forward(mb, /*for_backward=*/false));
    mb.ref_logprobs = engine::to_host_f32(fwd.logprobs);
    reference_tokens_ += mb.num_tokens();
  }
  return out;
}

Result<PolicyLossResult> Trainer::run_micro_batch(const MicroBatch& mb, std::span<const float> clip_ref,
                                                  double normaliser, TrainObjective objective) {
  const bool supervised = objective == TrainObjective::kSupervised;
  PolicyLossConfig cfg = options_.loss;
  if (supervised) cfg.use_tis = false, cfg.kl_coef = 0, cfg.entropy_coef = 0;
  const size_t n = static_cast<size_t>(mb.num_tokens());
  RLRUN_ASSIGN_OR_RETURN(ModelForward fwd, model_.forward(mb, /*for_backward=*/true));
  const std::vector<float> logprobs = engine::to_host_f32(fwd.logprobs);
  const std::vector<float> entropy = engine::to_host_f32(fwd.entropy);
  PolicyLossInputs in;
  in.logprobs = logprobs;
  in.old_logprobs = clip_ref.empty() ? std::span<const float>(mb.rollout_logprobs) : clip_ref;
  // ppo_clip_ref_logprobs: batch with one minibatch: the weights have not moved yet, so the
  // reference IS this forward's log-probs (detached); no recomputation pass was run.
  if (supervised || (clip_ref.empty() && cfg.ppo_clip_ref == ClipReference::kBatch)) in.old_logprobs = logprobs;
  if (cfg.use_tis) in.rollout_logprobs = mb.rollout_logprobs;
  if (cfg.kl_coef > 0) in.ref_logprobs = mb.ref_logprobs;
  in.entropy = entropy;
  in.advantages = mb.advantages;
  in.loss_mask = mb.loss_mask;
  in.cu_seqlens = mb.cu_seqlens;
  std::vector<float> d_logprobs(n), d_entropy(cfg.entropy_coef > 0 ? n : 0);
  RLRUN_ASSIGN_OR_RETURN(PolicyLossResult result,
                         policy_loss(cfg, in, normaliser, PolicyLossGrads{d_logprobs, d_entropy}));
  engine::Backend& backend = model_.backend();
  const Tensor dlogprob = engine::from_host(backend, Shape{static_cast<int64_t>(n)}, d_logprobs);
  const Tensor dentropy =
      d_entropy.empty() ? Tensor() : engine::from_host(backend, Shape{static_cast<int64_t>(n)}, d_entropy);
  model_.backward(dlogprob, dentropy);
  return result;
}

Result<MinibatchReport> Trainer::run_minibatch(std::span<const MicroBatch> micro_batches,
                                               const std::vector<std::vector<float>>* clip_ref, size_t first,
                                               TrainObjective objective, StepReport& report) {
  MinibatchReport mb_report;
  double normaliser = 0.0;
  for (const MicroBatch& mb : micro_batches) {
    if (mb.num_tokens() == 0) continue;
    RLRUN_ASSIGN_OR_RETURN(double d, policy_loss_normaliser(options_.loss, mb.loss_mask, mb.cu_seqlens));
    normaliser += d;
  }
  RLRUN_RETURN_IF_ERROR(all_reduce_doubles(trainer_comm_, std::span<double>(&normaliser, 1)));
  mb_report.normaliser = normaliser;
  if (normaliser <= 0.0) {  // every rank sees the same D, so every rank skips
    mb_report.skipped_no_tokens = true;
    return mb_report;
  }
  PolicyLossResult local;
  const auto fb_start = std::chrono::steady_clock::now();
  {
    PhaseScope phase(model_.backend(), memory_, "forward_backward", report.memory_forward_backward);
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      const MicroBatch& mb = micro_batches[i];
      if (mb.num_tokens() == 0) continue;
      std::span<const float> ref = clip_ref != nullptr ? std::span<const float>((*clip_ref)[first + i]) : std::span<const float>();
      RLRUN_ASSIGN_OR_RETURN(PolicyLossResult r, run_micro_batch(mb, ref, normaliser, objective));
      add_loss(local, r);
      report.tokens += mb.num_tokens();
    }
  }
  report.seconds_forward_backward += seconds_since(fb_start);
  const auto opt_start = std::chrono::steady_clock::now();
  {
    PhaseScope phase(model_.backend(), memory_, "optimizer", report.memory_optimizer);
    RLRUN_ASSIGN_OR_RETURN(mb_report.optimizer,
                           optimizer_->step(model_.params_flat(), model_.weights_flat(), model_.grads_flat(),
                                            learning_rate()));
    model_.weights_written();
    model_.zero_grads();
  }
  report.seconds_optimizer += seconds_since(opt_start);
  const std::vector<double> mine = loss_to_doubles(local);
  RLRUN_ASSIGN_OR_RETURN(std::vector<double> all, all_gather_doubles(trainer_comm_, mine));
  for (size_t r = 0; r * kLossFields < all.size(); ++r) add_loss(mb_report.loss, loss_from_doubles(&all[r * kLossFields]));
  report.trained_tokens += mb_report.loss.stats.tokens;
  return mb_report;
}

Status Trainer::check_batch_everywhere(std::span<const MicroBatch> micro_batches, TrainObjective objective) {
  const int64_t count = static_cast<int64_t>(micro_batches.size());
  Status mine;
  if (count < options_.number_of_minibatches) {
    mine = invalid_argument(str("trainer: ", count, " micro-batches cannot make number_of_minibatches = ",
                                options_.number_of_minibatches, " minibatches: the batch has too few sequences (groups, ",
                                "with share_prompts_in_training) to split; lower number_of_minibatches or ",
                                "micro_batch_rows, or raise prompts_batch_size_for_trainer"));
  }
  for (size_t i = 0; i < micro_batches.size() && mine.ok(); ++i) {
    const bool needs_ref = options_.loss.kl_coef > 0 && objective == TrainObjective::kPolicy && reference_ == nullptr;
    mine = validate_micro_batch(micro_batches[i], needs_ref).with_context(str("micro-batch ", i));
  }
  // Every rank learns whether all ranks can run the same collectives, before the first one.
  const double local[2] = {static_cast<double>(count), mine.ok() ? 0.0 : 1.0};
  RLRUN_ASSIGN_OR_RETURN(std::vector<double> all, all_gather_doubles(trainer_comm_, local));
  if (!mine.ok()) return mine;
  for (size_t r = 0; 2 * r < all.size(); ++r) {
    if (all[2 * r + 1] != 0.0) return invalid_argument(str("trainer: rank ", r, " rejected its micro-batches"));
    if (all[2 * r] != static_cast<double>(count)) {
      return invalid_argument(str("trainer: rank ", r, " got ", all[2 * r], " micro-batches, this rank ", count,
                                  "; every rank must get the same number"));
    }
  }
  return Status();
}

Result<StepReport> Trainer::train(std::span<const MicroBatch> micro_batches, TrainObjective objective) {
  RLRUN_RETURN_IF_ERROR(check_batch_everywhere(micro_batches, objective));
  std::vector<MicroBatch> expanded;  // shared prefixes written out, for a model that cannot share them
  if (!model_.shares_prefixes() &&
      std::any_of(micro_batches.begin(), micro_batches.end(), [](const MicroBatch& mb) { return !mb.prefix_of.empty(); })) {
    for (const MicroBatch& mb : micro_batches) expanded.push_back(expand_shared_prefixes(mb));
    micro_batches = expanded;
  }
  std::vector<MicroBatch> scored;  // with the KL reference's log-probs
  double reference_seconds = 0.0;
  if (objective == TrainObjective::kPolicy && options_.loss.kl_coef > 0 && reference_ != nullptr) {
    const auto start = std::chrono::steady_clock::now();
    RLRUN_ASSIGN_OR_RETURN(scored, score_with_reference(micro_batches));
    micro_batches = scored;
    reference_seconds = seconds_since(start);
  }
  const int64_t count = static_cast<int64_t>(micro_batches.size());
  if (!model_.has_grads()) model_.restore_grads();
  StepReport report;
  report.seconds_reference = reference_seconds;
  report.reference_tokens = std::exchange(reference_tokens_, 0);
  std::vector<std::vector<float>> clip_ref;
  if (objective == TrainObjective::kPolicy && options_.loss.ppo_clip_ref == ClipReference::kBatch &&
      options_.number_of_minibatches > 1) {
    const auto start = std::chrono::steady_clock::now();
    RLRUN_ASSIGN_OR_RETURN(clip_ref, recompute_logprobs(micro_batches));
    report.seconds_recompute = seconds_since(start);
  }
  const int64_t k = options_.number_of_minibatches;
  for (int64_t m = 0; m < k; ++m) {
    const size_t begin = static_cast<size_t>(m * count / k), end = static_cast<size_t>((m + 1) * count / k);
    RLRUN_ASSIGN_OR_RETURN(MinibatchReport mb,
                           run_minibatch(micro_batches.subspan(begin, end - begin),
                                         clip_ref.empty() ? nullptr : &clip_ref, begin, objective, report));
    report.minibatches.push_back(std::move(mb));
  }
  return report;
}

Result<std::string> Trainer::save_checkpoint(const std::string& root, int64_t step, const CheckpointExtras& extras,
                                             int64_t keep_last, ModelExporter exporter) {
  CheckpointOptions options;
  options.keep_last = keep_last;
  options.export_model = std::move(exporter);
  options.learning_rate = learning_rate();
  if (reference_captured_) options.reference = reference_;
  return trainer::save_checkpoint(root, step, extras, model_, *optimizer_, trainer_comm_, options);
}

Result<CheckpointInfo> Trainer::load_checkpoint(const std::string& dir) {
  RLRUN_ASSIGN_OR_RETURN(CheckpointInfo info, trainer::load_checkpoint(dir, model_, *optimizer_, trainer_comm_, reference_));
  reference_captured_ = info.reference_loaded;
  if (reference_ != nullptr && !info.reference_loaded && rank() == 0) {
    log::warn(str("trainer: ", dir, " holds no KL reference (saved with kl_coef: 0); the reference will be the "
                  "weights of this checkpoint"));
  }
  return info;
}

Result<WeightSendReport> Trainer::send_weights(uint64_t version) {
  if (sender_ == nullptr) return WeightSendReport{};  // not the sending rank
  const bool free_grads = options_.weight_broadcast_free_grad_buffers && model_.has_grads();
  // Freed for the WHOLE send and restored only after it (the reference restores before the send,
  // so the freed memory never covers the broadcast).
  if (free_grads) model_.release_grads();
  if (memory_ != nullptr) memory_->begin("weight_send");
  // The full f32 master where this rank has one; else (the optimizer keeps the master of its
  // shard) the compute weights, which a bf16 receiver rounds to the same values.
  const Tensor& master = model_.params_flat();
  Result<WeightSendReport> sent = sender_->send(master.defined() ? master : model_.weights_flat(), version);
  if (memory_ != nullptr) memory_->end();
  if (free_grads) model_.restore_grads();
  if (!sent.ok()) return sent.status();
  WeightSendReport report = std::move(sent).value();
  report.freed_grad_buffers = free_grads;
  if (memory_ != nullptr) report.rss_peak_bytes = last_rss_peak(*memory_, "weight_send");
  return report;
}

}  // namespace rlrun::trainer
