// tune/tune.h - what `rlrun tune` and the end of a run share: the tunable settings of a config,
// the cluster a profile ran on, a cluster description from the command line, the advice as text
// and as JSON.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/config/config.h"
#include "common/status.h"
#include "orchestrator/tune/advisor.h"
#include "orchestrator/tune/loop_costs.h"
#include "orchestrator/tune/loop_profile.h"

namespace rlrun::orchestrator::tune {

LoopSettings settings_from(const Config& config);
Cluster cluster_from(const LoopProfile& profile);

// "nodes=8,gpus_per_node=8" or "nodes=2,cores_per_node=64", with optional generation_speed=X,
// training_speed=Y (per process, relative to the measured run) and allreduce_gbps=Z; starts from
// `base` (what the run ran on). invalid_argument naming the part at fault.
Result<Cluster> parse_cluster(std::string_view spec, Cluster base);

// The simulation length for a run of `number_of_steps` (bounded: the prediction is per step).
SimOptions sim_options(int64_t number_of_steps, uint64_t seed);

// The table of candidates (at most `rows`, the current settings always among them) and the
// recommendation, for a terminal.
std::string render_advice(const Advice& advice, size_t rows);
// {"prediction": ..., "current": ..., "recommended": ..., "change": "...", "candidates": [...]}; each entry
// {"settings": {key: value}, "seconds_per_step", "trainer_idle_fraction", "rollout_idle_fraction", ...}.
// `prediction` is the --set settings when given, else the recommended ones.
nlohmann::ordered_json advice_json(const Advice& advice, bool given);
// The measured unit costs in a few lines (what the predictions rest on).
std::string describe_costs(const LoopCosts& costs);
// One line for the end of a run: what to change and the predicted effect, or "" when nothing gains.
std::string advice_line(const Advice& advice);

}  // namespace rlrun::orchestrator::tune
