#include "orchestrator/tune/advisor.h"

#include <algorithm>
#include <set>

#include "common/observe/log.h"
#include "common/status.h"

namespace rlrun::orchestrator::tune {
namespace {

std::vector<int64_t> with(std::set<int64_t> values, int64_t current) {
  values.insert(current);
  return {values.begin(), values.end()};
}

int64_t processes(const LoopSettings& s) { return s.inference_num_workers + s.trainer_num_workers; }

// Keys of `s` that differ from `current`.
int changes(const LoopSettings& s, const LoopSettings& current) {
  return (s.inference_num_workers != current.inference_num_workers) + (s.trainer_num_workers != current.trainer_num_workers) +
         (s.max_async_rollout != current.max_async_rollout) +
         (s.max_concurrent_prompts_per_server != current.max_concurrent_prompts_per_server) +
         (s.reference_on_rollout != current.reference_on_rollout);
}

// a is better than b: faster by more than 2%, or as fast with fewer processes, then less
// asynchrony, then fewer changes to the current settings.
bool better(const Candidate& a, const Candidate& b, const LoopSettings& current) {
  const double ta = a.prediction.seconds_per_step, tb = b.prediction.seconds_per_step;
  if (ta < tb * 0.98) return true;
  if (tb < ta * 0.98) return false;
  if (processes(a.settings) != processes(b.settings)) return processes(a.settings) < processes(b.settings);
  if (a.settings.max_async_rollout != b.settings.max_async_rollout)
    return a.settings.max_async_rollout < b.settings.max_async_rollout;
  if (changes(a.settings, current) != changes(b.settings, current))
    return changes(a.settings, current) < changes(b.settings, current);
  return ta < tb;
}

}  // namespace

Advice advise(const LoopCosts& costs, const LoopSettings& current, const Cluster& cluster, const SimOptions& options) {
  Advice advice;
  advice.current = {current, simulate(costs, current, cluster, options)};
  const int64_t slots = cluster.nodes * cluster.slots_per_node;
  // CPU nodes: processes that work in turn (a synchronous loop) may share cores usefully.
  const int64_t max_processes = cluster.devices ? slots : 2 * slots;
  std::set<int64_t> rollout_counts, trainer_counts{1};
  for (int64_t n = 1; n < max_processes; n = n < 4 ? n + 1 : n * 2) rollout_counts.insert(n);
  for (int64_t n = 2; n < max_processes; n *= 2) trainer_counts.insert(n);
  std::set<int64_t> lanes;
  const int64_t most_lanes = std::max<int64_t>(1, 2 * current.max_num_seqs / std::max<int64_t>(1, current.group_size));
  for (int64_t n = 1; n <= most_lanes; n *= 2) lanes.insert(n);
  for (int64_t w : with(rollout_counts, current.inference_num_workers)) {
    for (int64_t t : with(trainer_counts, current.trainer_num_workers)) {
      if (w + t > max_processes) continue;
      for (int64_t a : with({0, 1, 2}, current.max_async_rollout)) {
        for (int64_t l : with(lanes, current.max_concurrent_prompts_per_server)) {
          // With a KL term (and its cost measured), the reference's pass on either side.
          const bool both =
              current.kl_reference && !current.reference_stays_on_trainer && costs.reference_seconds_per_token > 0;
          for (bool on_rollout : both ? std::vector<bool>{false, true} : std::vector<bool>{current.reference_on_rollout}) {
            LoopSettings s = current;
            s.inference_num_workers = w;
            s.trainer_num_workers = t;
            s.max_async_rollout = a;
            s.max_concurrent_prompts_per_server = l;
            s.reference_on_rollout = on_rollout;
            Candidate c{s, simulate(costs, s, cluster, options)};
            if (c.prediction.feasible) advice.candidates.push_back(std::move(c));
          }
        }
      }
    }
  }
  std::sort(advice.candidates.begin(), advice.candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.prediction.seconds_per_step < b.prediction.seconds_per_step;
  });
  advice.recommended = advice.current;
  if (advice.candidates.empty() || !advice.current.prediction.feasible) return advice;
  const Candidate* best = &advice.candidates.front();
  for (const Candidate& c : advice.candidates)
    if (better(c, *best, current)) best = &c;
  if (best->prediction.seconds_per_step * kMinGain <= advice.current.prediction.seconds_per_step) {
    advice.recommended = *best;
    advice.change = !describe_change(current, best->settings).empty();
  }
  return advice;
}

std::string describe_change(const LoopSettings& from, const LoopSettings& to) {
  std::string out;
  auto add = [&](const char* key, int64_t a, int64_t b) {
    if (a != b) out += str(out.empty() ? "" : ", ", key, ": ", a, " -> ", b);
  };
  add("inference_num_workers", from.inference_num_workers, to.inference_num_workers);
  add("trainer_num_workers", from.trainer_num_workers, to.trainer_num_workers);
  add("max_async_rollout", from.max_async_rollout, to.max_async_rollout);
  add("max_concurrent_prompts_per_server", from.max_concurrent_prompts_per_server, to.max_concurrent_prompts_per_server);
  add("number_of_minibatches", from.number_of_minibatches, to.number_of_minibatches);
  add("prompts_batch_size_for_trainer", from.prompts_batch_size_for_trainer, to.prompts_batch_size_for_trainer);
  if (from.reference_on_rollout != to.reference_on_rollout)
    out += str(out.empty() ? "" : ", ", "kl_reference_on: ", from.reference_on_rollout ? "rollout" : "trainer", " -> ",
               to.reference_on_rollout ? "rollout" : "trainer");
  return out;
}

}  // namespace rlrun::orchestrator::tune
