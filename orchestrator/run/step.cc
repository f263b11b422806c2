// run/step.cc - one RL step: its batch (new from the scored groups, or one kept for a step redone
// after a trainer restart, run/training/step_replay.h), the train on every rank, the weight sync, and what
// the step leaves in the ledger, metrics.jsonl, Prometheus and the checkpoints.
#include <algorithm>
#include <cmath>
#include <map>

#include "common/check.h"
#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/data/batcher.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

bool Orchestrator::take_batch(std::vector<Group>& out) {
  std::vector<Group> stale;
  const auto too_stale = [&](const Group& g) {
    for (const Sample& s : g.samples)
      if (gate_.too_stale(s.version, steps_.completed)) return true;
    return false;
  };
  std::optional<std::vector<Group>> batch =
      dispatcher_.take_batch(static_cast<size_t>(config_.prompts_batch_size_for_trainer), too_stale, stale);
  for (const Group& g : stale) {
    for (uint32_t i = 0; i < group_size_; ++i) ledger_.discarded(sample_id(g.id, i), "stale");
    metrics_.count_discard("stale", group_size_);
  }
  if (!batch) return false;
  out = std::move(*batch);
  return true;
}

PackOptions Orchestrator::pack_options() const {
  PackOptions o;
  o.seq_len = config_.seq_len;
  o.pad_to_multiple_of = config_.pad_to_multiple_of;
  o.num_ranks = static_cast<int>(config_.trainer_num_workers);
  o.micro_batch_rows = static_cast<int>(config_.micro_batch_rows);
  o.share_prompts = config_.share_prompts_in_training;
  o.min_micro_batches = static_cast<int>(config_.number_of_minibatches);
  return o;
}

BatchBuild Orchestrator::pack_batch(const std::vector<Group>& batch, uint64_t step, RewardStats& rewards,
                                    std::vector<uint64_t>& sample_ids) {
  std::vector<TrainSequence> sequences;
  std::vector<uint64_t> ids;  // per sequence (an episode may give several)
  double reward_sum = 0, reward_sq = 0, adv_abs = 0;
  for (const Group& g : batch) {
    for (uint32_t i = 0; i < group_size_; ++i) {
      const Sample& s = g.samples[i];
      if (s.segments.empty()) {
        sequences.push_back(TrainSequence{g.prompt_ids, s.completion, s.logprobs, s.advantage, {}, s.ref_logprobs});
        ids.push_back(sample_id(g.id, i));
      }
      for (const EpisodeSegment& seg : s.segments) {
        sequences.push_back(TrainSequence{seg.prompt, seg.completion, seg.logprobs, s.advantage, seg.mask});
        ids.push_back(sample_id(g.id, i));
      }
      reward_sum += s.reward;
      reward_sq += s.reward * s.reward;
      adv_abs += std::fabs(s.advantage);
      metrics_.sample_staleness->Observe(static_cast<double>(StalenessGate::staleness(s.version, steps_.completed)));
    }
  }
  const double n = static_cast<double>(std::max<size_t>(1, batch.size() * group_size_));
  rewards.mean = reward_sum / n;
  rewards.std = std::sqrt(std::max(0.0, reward_sq / n - rewards.mean * rewards.mean));
  rewards.advantage_abs_mean = adv_abs / n;
  BatchBuild build = build_train_batches(sequences, pack_options(), step);
  // A sample is dropped when every sequence of it is (an episode keeps what fits).
  std::map<uint64_t, int> packed;
  for (uint64_t id : ids) ++packed[id];
  for (int i : build.dropped_too_long) --packed[ids[i]];
  for (const auto& [id, left] : packed) {
    if (left > 0) continue;
    ledger_.discarded(id, "too_long");
    metrics_.count_discard("too_long");
  }
  {  // episodes' sequences (masked): the policy's tokens and the environment's
    std::vector<bool> out(sequences.size(), false);
    for (int i : build.dropped_too_long) out[i] = true;
    int64_t policy = 0, environment = 0;
    for (size_t i = 0; i < sequences.size(); ++i) {
      if (out[i] || sequences[i].mask.empty()) continue;
      const int64_t trained = std::count(sequences[i].mask.begin(), sequences[i].mask.end(), uint8_t{1});
      policy += trained;
      environment += static_cast<int64_t>(sequences[i].mask.size()) - trained;
    }
    episodes_.note_trained(policy, environment);
  }
  if (!build.dropped_too_long.empty())
    too_long_log_.write(log::Level::kWarn, str("step ", step, ": ", build.dropped_too_long.size(), " sample(s) longer than seq_len = ",
                  config_.seq_len, " dropped (counted as discarded: too_long)"));
  sample_ids.clear();
  for (const auto& [id, left] : packed)
    if (left > 0) sample_ids.push_back(id);
  return build;
}

Status Orchestrator::new_step_batch(int64_t step, StepRecord& record, double& wait_s) {
  const auto wait_start = Clock::now();
  std::vector<Group> batch;
  {
    ScopedSpan span("wait_batch", "orchestrator");
    trainer_waiting_ = true;
    RLRUN_RETURN_IF_ERROR(check_interrupt());  // a ready batch would skip every tick
    while (!take_batch(batch)) {
      RLRUN_RETURN_IF_ERROR(tick(kTick, true));
      if (!no_batch().empty()) return invalid_argument(no_batch());
    }
    trainer_waiting_ = false;
    rewards_.batch_taken();
  }
  wait_s = seconds_since(wait_start);
  RewardStats rewards;
  record.step = step;
  record.build = pack_batch(batch, static_cast<uint64_t>(step), rewards, record.sample_ids);
  record.reward_mean = rewards.mean;
  record.reward_std = rewards.std;
  record.advantage_abs_mean = rewards.advantage_abs_mean;
  BatchIdentity identity = batch_identity(batch);
  record.group_ids = std::move(identity.group_ids);
  record.prompt_hash = std::move(identity.prompt_hash);
  if (record.build.per_rank.empty()) return Status();
  if (config_.log_samples_every > 0 && step % config_.log_samples_every == 0) {
    std::vector<nlohmann::ordered_json> shown;  // the first group's samples: one prompt, its spread
    for (const Sample& s : batch.front().samples) {
      if (shown.size() == kLoggedSamples) break;
      shown.push_back({{"prompt", batch.front().problem.prompt}, {"completion", s.text},
                       {"answer", batch.front().problem.answer}, {"reward", s.reward}, {"advantage", s.advantage},
                       {"correct", nullptr}});
    }
    log_samples("train", step, shown);  // the step these samples train
  }
  return Status();
}

Status Orchestrator::run_step() {
  const int64_t step = steps_.completed + 1;
  // ---- the batch: one kept for a step redone after a trainer restart, else a new one
  StepRecord next;
  double wait_s = 0;
  if (std::optional<StepRecord> redo = replay_.take_redo()) {
    next = std::move(*redo);
    RLRUN_CHECK(next.step == step, str("redoing step ", next.step, " after ", step - 1, " steps"));
  } else {
    RLRUN_RETURN_IF_ERROR(new_step_batch(step, next, wait_s));
    if (next.build.per_rank.empty()) {
      log::warn(str("step ", step, ": no sample fits seq_len; waiting for another batch"));
      return Status();
    }
  }
  replay_.begin(std::move(next));
  const StepRecord& record = *replay_.in_progress();
  committing_ = true;  // from here the step completes even after a SIGINT (run/orchestrator.h)
  const auto train_start = Clock::now();
  {
    ScopedSpan span("train", "orchestrator");
    span.arg("step", step);
    RLRUN_RETURN_IF_ERROR(train(record.build, str("trainer step ", step, record.redone ? " (redone)" : ""), true));
  }
  const double train_s = seconds_since(train_start);
  RLRUN_RETURN_IF_ERROR(weight_sync(static_cast<uint64_t>(step)));
  // ---- the step is done: weights of version `step` are everywhere
  steps_.completed = step;
  // A redone step's samples were counted when it first completed (run/training/step_replay.h).
  if (!record.counted)
    for (uint64_t id : record.sample_ids) ledger_.trained(id);
  const StepRecord& done = replay_.completed();
  steps_.tokens_trained += done.build.tokens;
  steps_.reward_means.push_back(done.reward_mean);
  if (first_step_record_ >= 0) {
    outcome_.trainer_failures[first_step_record_].first_step_at = unix_now();
    first_step_record_ = -1;
  }
  metrics_.tokens_trained->Increment(static_cast<double>(done.build.tokens));
  metrics_.reward_mean->Set(done.reward_mean);
  metrics_.reward_std->Set(done.reward_std);
  metrics_.advantage_abs_mean->Set(done.advantage_abs_mean);
  metrics_.trainer_step->Set(static_cast<double>(step));
  metrics_.step_wait_seconds->Observe(wait_s);
  metrics_.step_train_seconds->Observe(train_s);
  metrics_.step_weight_sync_seconds->Observe(last_sync_seconds_);
  std::optional<double> accuracy;  // task.eval_every: between steps, never after the last (run() does that)
  if (config_.task.eval_every > 0 && step % config_.task.eval_every == 0 && step < config_.number_of_steps) {
    RLRUN_ASSIGN_OR_RETURN(accuracy, evaluate(str("at step ", step)));
  }
  write_step_line(train_results_[0].metrics, wait_s, train_s, last_sync_seconds_, done, accuracy);
  profile_step(step, train_results_[0].metrics, train_s);
  balance_cores(step);
  print_progress(done.reward_mean);
  last_step_state_ = capture_state();
  RLRUN_RETURN_IF_ERROR(checkpoint_if_due());
  committing_ = false;
  return Status();
}

Status Orchestrator::train(const BatchBuild& build, const std::string& what, bool allow_dispatch) {
  train_results_.clear();
  train_error_.clear();
  train_error_lost_group_.clear();
  const auto started = Clock::now();
  for (const TrainBatch& b : build.per_rank) RLRUN_RETURN_IF_ERROR(server_.send(worker_name(Role::kTrainer, b.rank), b));
  const auto answered = [&](int rank) { return train_results_.count(rank) > 0; };
  while (train_results_.size() < build.per_rank.size()) {
    if (!train_error_.empty()) {
      const Status failed = internal_error(str(what, " failed: ", train_error_));
      if (train_error_lost_group_.empty()) return failed;
      // A collective failed: the peer's death, if it shows within the grace, is the failure;
      // else (a stopped peer, a broken link) this rank's, and the group restarts all the same.
      if (Status dead = blame_dead_worker(failed); trainer_failure_) return dead;
      return note_trainer_failure(*worker_by_name(train_error_lost_group_),
                                  str("lost its data-parallel group in ", what, ": ", train_error_));
    }
    RLRUN_RETURN_IF_ERROR(check_train_timeout(what, started, answered));
    RLRUN_RETURN_IF_ERROR(tick(kTick, allow_dispatch));
  }
  return Status();
}

}  // namespace rlrun::orchestrator
