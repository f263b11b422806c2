// run/step.cc - one RL step: its batch (new from the scored groups, or one kept for a step redone
// after a trainer restart, run/training/step_replay.h), the train on every rank, the weight sync,
// and what the step leaves in the ledger, metrics.jsonl, Prometheus and the checkpoints.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "common/check.h"
#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/data/batcher.h"
#include "orchestrator/run/orchestrator.h"
#include "trainer/checkpoint_files.h"

namespace rlrun::orchestrator {

namespace {

// samples.jsonl: a few completions of every log_samples_every-th step.
constexpr size_t kLoggedSamples = 4;

// Which prompts a step trained, for metrics.jsonl: an XXH3-64 hash of the prompts' texts in batch
// order, as 16 hex digits (a resumed run must train the same ones).
std::string prompt_hash(const std::vector<Dispatcher::Group>& batch) {
  trainer::Checksum hash;
  for (const Dispatcher::Group& g : batch)
    hash.update(g.problem.prompt.data(), g.problem.prompt.size() + 1);  // with the NUL: prompts stay apart
  return trainer::checksum_hex(hash.value());
}

}  // namespace

PackOptions pack_options(const Config& config) {
  PackOptions o;
  o.seq_len = config.seq_len;
  o.pad_to_multiple_of = config.pad_to_multiple_of;
  o.num_ranks = static_cast<int>(config.trainer_num_workers);
  o.micro_batch_rows = static_cast<int>(config.micro_batch_rows);
  o.share_prompts = config.share_prompts_in_training;
  o.min_micro_batches = static_cast<int>(config.number_of_minibatches);
  return o;
}

BatchBuild Orchestrator::pack_batch(const std::vector<Group>& batch, uint64_t step, StepRecord& record) {
  std::vector<TrainSequence> sequences;
  std::vector<uint64_t> ids;  // per sequence (an episode may give several)
  double reward_sum = 0, reward_sq = 0, adv_abs = 0;
  for (const Group& g : batch) {
    for (uint32_t i = 0; i < dispatcher_.group_size(); ++i) {
      const Dispatcher::Sample& s = g.samples[i];
      if (s.segments.empty()) {
        sequences.push_back(TrainSequence{g.prompt_ids, s.completion, s.logprobs, s.advantage, {}, s.ref_logprobs});
        ids.push_back(dispatcher_.sample_id(g.id, i));
      }
      for (const EpisodeSegment& seg : s.segments) {
        sequences.push_back(TrainSequence{seg.prompt, seg.completion, seg.logprobs, s.advantage, seg.mask});
        ids.push_back(dispatcher_.sample_id(g.id, i));
      }
      reward_sum += s.reward;
      reward_sq += s.reward * s.reward;
      adv_abs += std::fabs(s.advantage);
      metrics_.sample_staleness->Observe(static_cast<double>(StalenessGate::staleness(s.version, steps_.completed)));
    }
  }
  const double n = static_cast<double>(std::max<size_t>(1, batch.size() * dispatcher_.group_size()));
  record.reward_mean = reward_sum / n;
  record.reward_std = std::sqrt(std::max(0.0, reward_sq / n - record.reward_mean * record.reward_mean));
  record.advantage_abs_mean = adv_abs / n;
  BatchBuild build = build_train_batches(sequences, pack_options(config_), step);
  // A sample is dropped when every sequence of it is (an episode keeps what fits).
  std::map<uint64_t, int> packed;
  for (uint64_t id : ids) ++packed[id];
  for (int i : build.dropped_too_long) --packed[ids[i]];
  for (const auto& [id, left] : packed) {
    if (left > 0) continue;
    ledger_.discarded(id, "too_long");
    metrics_.count_discard("too_long");
  }
  std::vector<bool> out(sequences.size(), false);
  for (int i : build.dropped_too_long) out[i] = true;
  int64_t policy = 0, environment = 0;  // episodes' sequences (masked): the policy's tokens and the environment's
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (out[i] || sequences[i].mask.empty()) continue;
    const int64_t trained = std::count(sequences[i].mask.begin(), sequences[i].mask.end(), uint8_t{1});
    policy += trained;
    environment += static_cast<int64_t>(sequences[i].mask.size()) - trained;
  }
  episodes_.note_trained(policy, environment);
  if (!build.dropped_too_long.empty())
    too_long_log_.write(log::Level::kWarn, str("step ", step, ": ", build.dropped_too_long.size(),
                                               " sample(s) longer than seq_len = ", config_.seq_len,
                                               " dropped (counted as discarded: too_long)"));
  record.sample_ids.clear();
  for (const auto& [id, left] : packed)
    if (left > 0) record.sample_ids.push_back(id);
  return build;
}

Status Orchestrator::new_step_batch(int64_t step, StepRecord& record, double& wait_s) {
  const auto wait_start = Clock::now();
  std::vector<Group> batch;
  {
    ScopedSpan span("wait_batch", "orchestrator");
    trainer_waiting_ = true;
    RLRUN_RETURN_IF_ERROR(check_interrupt());  // a ready batch would skip every tick
    // prompts_batch_size_for_trainer ready groups; stale ones are discarded.
    const auto too_stale = [&](const Group& g) {
      return std::any_of(g.samples.begin(), g.samples.end(),
                         [&](const Dispatcher::Sample& s) { return gate_.too_stale(s.version, steps_.completed); });
    };
    RLRUN_RETURN_IF_ERROR(wait_until(
        [&]() -> Result<bool> {
          std::vector<Group> stale;
          std::optional<std::vector<Group>> taken = dispatcher_.take_batch(
              static_cast<size_t>(config_.prompts_batch_size_for_trainer), too_stale, stale);
          for (const Group& g : stale) {
            for (uint32_t i = 0; i < dispatcher_.group_size(); ++i)
              ledger_.discarded(dispatcher_.sample_id(g.id, i), "stale");
            metrics_.count_discard("stale", dispatcher_.group_size());
          }
          if (taken) {
            batch = std::move(*taken);
            return true;
          }
          if (!no_batch().empty()) return invalid_argument(no_batch());
          return false;
        },
        true));
    trainer_waiting_ = false;
    rewards_.batch_taken();  // the next step's wait starts afresh
  }
  wait_s = seconds_since(wait_start);
  record.step = step;
  record.build = pack_batch(batch, static_cast<uint64_t>(step), record);
  for (const Group& g : batch) record.group_ids.push_back(g.id);
  record.prompt_hash = prompt_hash(batch);
  if (record.build.per_rank.empty()) return Status();
  if (config_.log_samples_every > 0 && step % config_.log_samples_every == 0) {
    std::vector<nlohmann::ordered_json> shown;  // the first group's samples: one prompt, its spread
    for (const Dispatcher::Sample& s : batch.front().samples) {
      if (shown.size() == kLoggedSamples) break;
      shown.push_back({{"prompt", batch.front().problem.prompt}, {"completion", s.text},
                       {"answer", batch.front().problem.answer}, {"reward", s.reward}, {"advantage", s.advantage},
                       {"correct", nullptr}});
    }
    recorder_.log_samples("train", step, shown);  // the step these samples train
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
    RLRUN_RETURN_IF_ERROR(
        trainers_.train(record.build, str("trainer step ", step, record.redone ? " (redone)" : ""), true));
  }
  const double train_s = seconds_since(train_start);
  RLRUN_RETURN_IF_ERROR(sync_.sync(static_cast<uint64_t>(step), true));
  // ---- the step is done: weights of version `step` are everywhere
  steps_.completed = step;
  // A redone step's samples were counted when it first completed (run/training/step_replay.h).
  if (!record.counted)
    for (uint64_t id : record.sample_ids) ledger_.trained(id);
  const StepRecord& done = replay_.completed();
  steps_.tokens_trained += done.build.tokens;
  steps_.reward_means.push_back(done.reward_mean);
  trainers_.step_completed();
  metrics_.tokens_trained->Increment(static_cast<double>(done.build.tokens));
  metrics_.reward_mean->Set(done.reward_mean);
  metrics_.reward_std->Set(done.reward_std);
  metrics_.advantage_abs_mean->Set(done.advantage_abs_mean);
  metrics_.trainer_step->Set(static_cast<double>(step));
  metrics_.step_wait_seconds->Observe(wait_s);
  metrics_.step_train_seconds->Observe(train_s);
  metrics_.step_weight_sync_seconds->Observe(sync_.last_seconds());
  std::optional<double> accuracy;  // task.eval_every: between steps, never after the last (run() does that)
  if (config_.task.eval_every > 0 && step % config_.task.eval_every == 0 && step < config_.number_of_steps) {
    RLRUN_ASSIGN_OR_RETURN(accuracy, evaluator_.evaluate(str("at step ", step), step, steps_.version()));
  }
  step_done(done, wait_s, train_s, accuracy);
  checkpoints_.step_completed(capture_state());
  RLRUN_RETURN_IF_ERROR(checkpoints_.save_if_due(true));
  committing_ = false;
  return Status();
}

void Orchestrator::step_done(const StepRecord& done, double wait_s, double train_s, std::optional<double> accuracy) {
  auto [terms, server_logs] = rewards_.take_means();
  recorder_.write_step_line(RunRecorder::StepLine{
      done, wait_s, train_s, sync_.last_seconds(), trainers_.rank0_metrics(), accuracy,
      gate_.current_async_level(outstanding_groups()), ledger_.summary().discarded_total(), trainers_.stats().restarts,
      std::move(terms), std::move(server_logs),
      rewards_.uses_server() ? std::optional<int64_t>(rewards_.server_waiting()) : std::nullopt});
  recorder_.after_step(steps_.completed, trainers_.rank0_metrics(), train_s, sync_.last_seconds(),
                       threads_.base_trainer_threads(), rewards_.server_round_trip_seconds());
  LoopTotals totals;
  totals.step = steps_.completed;
  totals.loop_seconds = recorder_.loop_seconds();
  totals.trainer_idle_seconds = recorder_.stats().trainer_idle_seconds;
  for (const WorkerSlot& w : fleet_.slots())
    if (w.role == Role::kRollout) totals.rollout_idle_seconds += w.idle_seconds;
  threads_.after_step(steps_.completed, config_.number_of_steps, totals);
  recorder_.print_progress(done.reward_mean, evaluator_.last_accuracy());
}

ResumeState Orchestrator::capture_state() const {
  ResumeState s;
  s.steps_completed = steps_.completed;
  s.task_draws = admission_.consumed();
  std::tie(s.next_group, s.next_request) = dispatcher_.next_ids();
  s.prompts_skipped = admission_.stats().prompts_skipped;
  s.tokens_generated = steps_.tokens_generated;
  s.tokens_trained = steps_.tokens_trained;
  s.step_reward_means = steps_.reward_means;
  s.accuracy_before = evaluator_.stats().accuracy_before;
  s.loop_seconds = recorder_.loop_seconds();
  s.trainer_idle_seconds = recorder_.stats().trainer_idle_seconds;
  for (const WorkerSlot& w : fleet_.slots())
    if (w.role == Role::kRollout) s.rollout_idle_seconds[w.name] = w.idle_seconds;
  SampleLedger::Summary now = ledger_.summary();
  // Generated and waiting for a batch (max_async_rollout > 0): a resumed run never trains these.
  if (now.lost > 0) now.discarded["unused_at_resume"] += now.lost;
  // Redoing steps after a trainer restart: the samples of the later kept steps are counted trained
  // already, but this state is of an earlier step. A run resumed from it trains those steps with
  // other samples, and counts these as cancelled (samples_at_resume).
  const int64_t ahead = replay_.samples_counted_ahead();
  now.trained -= ahead;
  now.generated -= ahead;
  const std::optional<ResumeState>& resumed = checkpoints_.resumed();
  s.samples = resumed ? add_samples(resumed->samples, now) : now;
  return s;
}

}  // namespace rlrun::orchestrator
