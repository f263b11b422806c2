#include "orchestrator/tune/loop_costs.h"

#include <algorithm>

namespace rlrun::orchestrator::tune {

Result<LoopCosts> fit_costs(const LoopProfile& profile) {
  const rollout::StepCostSums steps = profile.engine_steps();
  const LoopProfile::TrainSums& train = profile.train();
  if (steps.steps() < 1)
    return invalid_argument("the run measured no rollout engine step yet (profile.json has none): let it run a few steps");
  if (train.steps < 1 || train.tokens <= 0 || profile.completion_histogram().empty())
    return invalid_argument("the run completed no RL step yet (profile.json has none): let it run a few steps");
  LoopCosts c;
  c.threads = std::max<int64_t>(1, profile.threads);
  c.on_devices = profile.on_devices;
  const double per_thread = c.on_devices ? 1.0 : 1.0 / static_cast<double>(c.threads);
  // CPU nodes: CPU seconds are the work whatever shared the cores; devices: the wall time is.
  c.engine_step = steps.fit(!c.on_devices);
  c.engine_step.fixed *= per_thread;
  c.engine_step.per_sequence *= per_thread;
  c.engine_step.per_prefill_token *= per_thread;
  c.engine_step.per_context_token *= per_thread;

  const double n = static_cast<double>(train.steps);
  const double compute_wall = train.compute_seconds + train.optimizer_seconds;
  const double work = c.on_devices || train.cpu_seconds <= 0 ? compute_wall : train.cpu_seconds * per_thread;
  const double optimizer_share = compute_wall > 0 ? train.optimizer_seconds / compute_wall : 0.0;
  // The reference's forward pass on the trainer (kl_reference_on: trainer) is its own cost, moved
  // with it when the simulator puts it on the rollout workers.
  const LoopProfile::ReferenceSums ref = profile.reference();
  const double reference_share = compute_wall > 0 && ref.trainer_tokens > 0 ? ref.trainer_seconds / compute_wall : 0.0;
  c.train_seconds_per_token = work * std::max(0.0, 1 - optimizer_share - reference_share) / train.tokens;
  if (ref.trainer_tokens > 0)
    c.reference_seconds_per_token = work * reference_share / ref.trainer_tokens;
  else if (ref.rollout_tokens > 0)
    c.reference_seconds_per_token = ref.rollout_cpu_seconds * (c.on_devices ? 1.0 : per_thread) / ref.rollout_tokens;
  c.train_seconds_per_optimizer_step = train.optimizer_steps > 0 ? work * optimizer_share / train.optimizer_steps : 0.0;
  c.train_seconds_fixed = std::max(0.0, (train.wall_seconds - compute_wall) / n);
  c.weight_sync_seconds = train.sync_seconds / n;
  c.weight_load_seconds = profile.mean_weight_load_seconds();
  c.reward_seconds = profile.reward_seconds();
  c.request_overhead_seconds = profile.mean_request_overhead_seconds();
  c.orchestrator_cores = profile.loop_seconds() > 0 ? profile.orchestrator_cpu_seconds() / profile.loop_seconds() : 0.0;
  c.prompt_tokens = profile.mean_prompt_tokens();
  c.completion_tokens = profile.completion_histogram();
  c.group_discard_fraction = profile.groups_finished() > 0
                                 ? static_cast<double>(profile.groups_discarded()) / static_cast<double>(profile.groups_finished())
                                 : 0.0;
  c.parameters = profile.parameters;
  c.measured_rollout_workers = std::max<int64_t>(1, profile.rollout_workers);
  const LoopProfile::LentSums& lent = profile.lent_train();
  if (lent.steps > 0 && lent.threads > 0 && lent.tokens > 0 && lent.compute_seconds > 0 && train.compute_seconds > 0) {
    c.trainer_lent_threads = lent.threads;
    c.trainer_lent_speed = (train.compute_seconds / train.tokens) / (lent.compute_seconds / lent.tokens);
  }
  return c;
}

}  // namespace rlrun::orchestrator::tune
