// run/metrics.cc - registers the orchestrator's metric families.
#include "orchestrator/run/metrics.h"

namespace rlrun::orchestrator {

RunMetrics::RunMetrics(prometheus::Registry& r, const std::vector<std::string>& rollout_workers,
                       const std::vector<std::string>& processes) {
  trainer_idle_seconds =
      &counter_family(r, "trainer_idle_seconds_total", "seconds the trainer waited for a batch").Add({});
  auto& rollout_idle = counter_family(r, "rollout_idle_seconds_total",
                                      "seconds a rollout worker had no work (empty lanes, or gated)");
  for (const std::string& w : rollout_workers) rollout_idle_seconds[w] = &rollout_idle.Add({{"worker", w}});
  auto& phase = histogram_family(r, "step_phase_seconds", "trainer step time by phase");
  const auto buckets = exponential_buckets(0.01, 2.0, 16);
  step_wait_seconds = &phase.Add({{"phase", "wait"}}, buckets);
  step_train_seconds = &phase.Add({{"phase", "train"}}, buckets);
  step_weight_sync_seconds = &phase.Add({{"phase", "weight_sync"}}, buckets);
  queue_depth = &gauge_family(r, "queue_depth_groups", "finished groups waiting for a trainer batch").Add({});
  in_flight_groups = &gauge_family(r, "in_flight_groups", "groups being generated").Add({});
  async_level = &gauge_family(r, "async_level", "inference_step - trainer_step - 1").Add({});
  max_async_rollout = &gauge_family(r, "max_async_rollout", "the bound on async_level (config max_async_rollout)").Add({});
  trainer_step = &gauge_family(r, "trainer_step", "trainer steps completed").Add({});
  sample_staleness = &histogram_family(r, "sample_staleness_steps", "weight versions between sampling and training")
                          .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 3, 4, 8, 16});
  discarded = &counter_family(r, "samples_discarded_total", "samples dropped, by reason");
  for (const char* reason : kDiscardReasons) discarded->Add({{"reason", reason}});  // 0 from the start
  cancelled = &counter_family(r, "samples_cancelled_total", "in-flight samples cancelled").Add({});
  worker_restarts = &counter_family(r, "worker_restarts_total", "rollout worker restarts after a failure, by worker");
  for (const std::string& w : rollout_workers) worker_restarts->Add({{"worker", w}});  // 0 from the start
  trainer_restarts = &counter_family(r, "trainer_restarts_total",
                                     "restarts of the trainer group (every rank, from the newest checkpoint) after a "
                                     "rank died or hung").Add({});
  reward_term = &gauge_family(r, "reward_term_mean", "each task.reward term's mean (unweighted) over the samples "
                                                  "scored since the previous step");
  reward_server_log = &gauge_family(r, "reward_server_log_mean", "the reward server's extra_logs, mean over the "
                                                              "samples scored since the previous step");
  reward_requests = &counter_family(r, "reward_requests_total", "requests to the reward server (task.reward_url)");
  reward_round_trip_seconds = &gauge_family(r, "reward_round_trip_seconds", "median round trip of the reward "
                                                                            "server's recent successful requests").Add({});
  reward_waiting_samples = &gauge_family(r, "reward_waiting_samples", "samples waiting for the reward server").Add({});
  episodes = &counter_family(r, "episodes_total", "episodes of the environment server (task.environment_url), by "
                                                 "outcome: completed, retried (an attempt failed), failed, cancelled");
  episodes_running = &gauge_family(r, "episodes_running", "episode attempts the environment server is running").Add({});
  tune_seconds_per_step = &gauge_family(r, "tune_predicted_seconds_per_step", "seconds per RL step the loop simulator "
                                                                          "predicts for the run's settings and the recommended ones");
  tune_idle_fraction = &gauge_family(r, "tune_predicted_idle_fraction", "trainer and rollout idle fractions the loop "
                                                                      "simulator predicts, by settings and side");
  tune_recommendation = &gauge_family(r, "tune_recommendation", "1 for the change the loop simulator recommends "
                                                               "(label change; \"\" = keep the settings)");
  tokens_generated = &counter_family(r, "tokens_generated_total", "completion tokens generated").Add({});
  tokens_trained = &counter_family(r, "tokens_trained_total", "tokens in trainer batches").Add({});
  eval_accuracy = &gauge_family(r, "eval_accuracy", "held-out exact-match accuracy (greedy) of the last evaluation").Add({});
  reward_mean = &gauge_family(r, "reward_mean", "mean reward of the last trained batch").Add({});
  reward_std = &gauge_family(r, "reward_std", "reward standard deviation of the last trained batch").Add({});
  advantage_abs_mean = &gauge_family(r, "advantage_abs_mean", "mean |advantage| of the last trained batch").Add({});
  weight_sync_seconds = &counter_family(r, "weight_sync_seconds_total", "seconds spent in weight syncs").Add({});
  weight_sync_bytes = &counter_family(r, "weight_sync_bytes_total", "weight bytes sent to rollout workers").Add({});
  auto& mem = gauge_family(r, "worker_resident_bytes", "resident memory per process, from heartbeats");
  auto& peak = gauge_family(r, "worker_peak_resident_bytes", "peak resident memory per process, from heartbeats");
  auto& threads = gauge_family(r, "worker_compute_threads",
                               "CPU threads a worker process computes with (changed by balance_cpu_threads)");
  for (const std::string& p : processes) {
    memory_bytes[p] = &mem.Add({{"process", p}});
    peak_memory_bytes[p] = &peak.Add({{"process", p}});
    compute_threads[p] = &threads.Add({{"process", p}});
  }
  auto& running = gauge_family(r, "rollout_running_sequences", "sequences running in the worker's KV cache");
  auto& waiting = gauge_family(r, "rollout_waiting_sequences", "sequences queued in the worker (new or preempted)");
  auto& used = gauge_family(r, "rollout_kv_blocks_used", "KV-cache blocks in use");
  auto& free = gauge_family(r, "rollout_kv_blocks_free", "KV-cache blocks free");
  auto& tps = gauge_family(r, "rollout_tokens_per_second", "tokens generated per second, last heartbeat interval");
  auto& version = gauge_family(r, "rollout_weight_version", "weight version the worker generates with");
  auto& update = gauge_family(r, "rollout_weight_update_seconds", "duration of the worker's last weight update");
  auto& preempt = counter_family(r, "rollout_preemptions_total", "sequences preempted for KV-cache room");
  auto& engine_idle = counter_family(r, "rollout_engine_idle_seconds_total",
                                     "seconds the worker's engine had no sequence to run (its own view)");
  for (const std::string& w : rollout_workers) {
    const prometheus::Labels l = {{"worker", w}};
    rollout[w] = {&running.Add(l), &waiting.Add(l), &used.Add(l), &free.Add(l), &tps.Add(l), &version.Add(l),
                  &update.Add(l), &preempt.Add(l), &engine_idle.Add(l)};
  }
}

void RunMetrics::set_recommendation(const std::string& change) {
  if (recommendation_ != nullptr) tune_recommendation->Remove(recommendation_);
  recommendation_ = &tune_recommendation->Add({{"change", change}});
  recommendation_->Set(1);
}

void RunMetrics::observe_rollout(const std::string& worker, const Heartbeat& hb) {
  auto it = rollout.find(worker);
  if (it == rollout.end()) return;
  RolloutGauges& g = it->second;
  g.running->Set(hb.active_requests);
  g.waiting->Set(hb.queued_requests);
  g.kv_blocks_used->Set(hb.kv_blocks_used);
  g.kv_blocks_free->Set(hb.kv_blocks_free);
  g.tokens_per_second->Set(hb.tokens_per_second);
  g.weight_version->Set(static_cast<double>(hb.weight_version));
  g.weight_update_seconds->Set(hb.last_weight_sync_seconds);
  // the worker reports totals since it started; counters advance by the difference
  if (hb.preemptions > g.last_preemptions) g.preemptions->Increment(static_cast<double>(hb.preemptions - g.last_preemptions));
  g.last_preemptions = hb.preemptions;
  if (hb.idle_seconds > g.last_engine_idle_seconds) g.engine_idle_seconds->Increment(hb.idle_seconds - g.last_engine_idle_seconds);
  g.last_engine_idle_seconds = hb.idle_seconds;
}

void RunMetrics::count_discard(const std::string& reason, double n) { discarded->Add({{"reason", reason}}).Increment(n); }

void RunMetrics::count_worker_restart(const std::string& worker) { worker_restarts->Add({{"worker", worker}}).Increment(); }

}  // namespace rlrun::orchestrator
